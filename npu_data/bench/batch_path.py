"""The path of one batch through the package: which modules run and which calls cross from
one ``npu_data`` package to another.

    python -m npu_data.bench.batch_path [--store raw|encoded] [--workers 0] [--out FILE]

One batch of a ``ShardDataset`` (a generated sample project of 4 images, imported; the
epoch is that one batch) through the
DataLoader with a keyed ``Compose([RandomResizedCrop(224), ColorJitter(0.4, 0.4, 0.4, 0.1),
RandomHorizontalFlip()])``, in process (the read-ahead thread included), traced with
``sys.setprofile`` and ``threading.setprofile`` after one warm-up pass: the modules whose
Python functions run, the calls whose caller and callee sit in different packages
(``npu_data.loaders`` -> ``npu_data.transforms``, ...), those between ``loaders`` and
``transforms``, the distinct ``transforms`` functions the loaders call (``Pipeline.draw`` and
``Pipeline.finish``: the crop at read is the readers' code, ``npu_data.readers``) and how
often the leading crop's parameters are drawn (``RandomResizedCrop.make_params``).
Deterministic: Python calls are counted, not timed.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import orjson


@dataclass
class Trace:
    """What one batch ran: module names, cross-package call counts by (caller, callee)
    package, and call counts of the functions asked about."""

    modules: set[str] = field(default_factory=set)
    crossings: Counter[tuple[str, str]] = field(default_factory=Counter)
    edges: Counter[tuple[str, str]] = field(default_factory=Counter)
    watched: Counter[str] = field(default_factory=Counter)
    loader_calls: set[str] = field(default_factory=set)  # transforms functions loaders call

    def summary(self) -> dict[str, Any]:
        lt = sum(n for (a, b), n in self.crossings.items()
                 if {a, b} == {"loaders", "transforms"})
        return {
            "modules": len(self.modules),
            "cross_package_calls": sum(self.crossings.values()),
            "loaders_transforms_calls": lt,
            "loaders_transforms_functions": len(self.loader_calls),
            "loaders_transforms_function_names": sorted(self.loader_calls),
            "watched": dict(self.watched),
            "module_names": sorted(self.modules),
            "crossings": {f"{a} -> {b}": n for (a, b), n in sorted(self.crossings.items())},
            "loaders_transforms_edges": {f"{a} -> {b}": n for (a, b), n in
                                         sorted(self.edges.items())},
        }


def _module(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) and name.startswith("npu_data.") else None


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else parts[1].removesuffix(".py")


def _qualname(frame: FrameType) -> str:
    """The called function's qualified name (``Pipeline.draw``); Python 3.10's code objects
    have no ``co_qualname``: a method's is its ``self``'s class and its name."""
    code = frame.f_code
    if hasattr(code, "co_qualname"):
        return str(code.co_qualname)
    owner = frame.f_locals.get("self") if "self" in code.co_varnames[:1] else None
    return code.co_name if owner is None else f"{type(owner).__name__}.{code.co_name}"


def trace(fn: Any, watch: tuple[str, ...] = ()) -> Trace:
    """Run ``fn()`` under the profilers; ``watch``: qualified names ``module:function``
    whose calls are counted."""
    out = Trace()
    here = __name__

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if callee is None or callee == here:
            return
        out.modules.add(callee)
        code = frame.f_code
        key = f"{callee}:{_qualname(frame)}"
        if key in watch:
            out.watched[key] += 1
        caller = _module(frame.f_back)
        if caller is None or caller == here:
            return
        a, b = _package(caller), _package(callee)
        if a != b:
            out.crossings[(a, b)] += 1
            if {a, b} == {"loaders", "transforms"}:
                out.edges[(f"{caller}", f"{callee}.{code.co_name}")] += 1
            if (a, b) == ("loaders", "transforms"):
                out.loader_calls.add(key)

    # other objects' finalizers (a stream left by earlier code) run before, not inside it
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        if was_enabled:
            gc.enable()
    return out


CROP_DRAW = "npu_data.transforms.crop:RandomResizedCrop.make_params"


def one_batch(root: Path, store: str = "raw", workers: int = 0) -> Trace:
    """Import a small sample project into ``root`` and trace one batch (module doc)."""
    from npu_data import DataLoader, ShardDataset
    from npu_data.shards.importer import import_dataset
    from npu_data.tools.sample_data import make_sample_project
    from npu_data.transforms import (
        ColorJitter,
        Compose,
        RandomHorizontalFlip,
        RandomResizedCrop,
    )

    project = make_sample_project(root / "project", n_images=4, width=320, height=240)
    shards = root / f"shards-{store}"
    if not (shards / "manifest.json").is_file():
        import_dataset(project.export_path, shards, store=store)
    ds = ShardDataset(shards)
    pipeline = Compose([RandomResizedCrop(224), ColorJitter(0.4, 0.4, 0.4, 0.1),
                        RandomHorizontalFlip()])
    # the whole dataset is one batch: an epoch is that batch, nothing read ahead of it
    loader = DataLoader(ds, batch_size=len(ds), shuffle=True, seed=1, num_workers=workers,
                        device="cpu", transform=pipeline)
    list(loader)  # warm-up: compiled kernels, caches, lazy imports

    def run() -> None:
        batches = list(loader)
        assert len(batches) == 1

    return trace(run, watch=(CROP_DRAW,))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m npu_data.bench.batch_path",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["raw", "encoded"], default="raw")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", help="write the whole trace as JSON here")
    ap.add_argument("--details", action="store_true",
                    help="print the module list and the loaders <-> transforms edges")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        summary = one_batch(Path(tmp), args.store, args.workers).summary()
    print(f"modules: {summary['modules']}  cross-package calls: "
          f"{summary['cross_package_calls']}  loaders<->transforms: "
          f"{summary['loaders_transforms_calls']}  transforms functions the loaders call: "
          f"{summary['loaders_transforms_functions']}  leading crop drawn: "
          f"{summary['watched'].get(CROP_DRAW, 0)}x")
    if args.details:
        print("\n".join(summary["module_names"]))
        for k, v in summary["crossings"].items():
            print(f"  {k}: {v}")
        for k, v in summary["loaders_transforms_edges"].items():
            print(f"  {k}: {v}")
        print("\n".join(summary["loaders_transforms_function_names"]))
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
