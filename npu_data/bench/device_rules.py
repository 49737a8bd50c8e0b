"""The accelerator rules checked on a real device: no host syncs, no float64, once warm.

    python -m npu_data.bench.device_rules [--device cuda] [--images 256] [--batches 6]

Runs the bench's whole pipeline (raw and encoded shards -> our DataLoader with
``device=...`` -> RandomResizedCrop + ColorJitter + flip on the device) and, after one
warm-up batch, counts

- host syncs, by CUDA's own sync debugging (``torch.cuda.set_sync_debug_mode("warn")``:
  every blocking copy, ``item()`` or data-dependent shape warns), per call site;
- float64 tensors made on the device, and every op that ran on the device, by a
  ``TorchDispatchMode`` over the loop.

``--device cpu`` is a dry run of the same loop (nothing runs on a device there). The CPU test ``tests/transforms/test_device_rules.py`` checks the same rules by op names; this
is the hardware's word. Prints one table and exits 1 when a rule is broken.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from npu_data import device as dev
from npu_data.parity.precision import wrapped_numbers

_WIDE = (torch.float64, torch.complex128)


class _DeviceOps(TorchDispatchMode):
    """Counts the ops with a device tensor among their inputs or outputs, and float64 ones."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.wide: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*wrapped_numbers(func, args), **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        on_device = [t for t in tensors if dev.is_accelerator(t.device)]
        if on_device:
            name = str(func.overloadpacket.__name__)
            self.ops[name] += 1
            if any(t.dtype in _WIDE for t in on_device):
                self.wide[name] += 1
        return out


def _site() -> str:
    """The innermost npu_data frame of the current stack (where a sync was asked for), else
    the innermost frame outside the warnings machinery."""
    frames = [fr for fr in traceback.extract_stack()[:-2]
              if "warnings" not in fr.filename and "device_rules" not in fr.filename]
    for fr in reversed(frames):
        if "npu_data" in fr.filename:
            return f"{Path(fr.filename).name}:{fr.lineno} {fr.name}"
    if not frames:
        return "?"
    last = frames[-1]
    return f"outside npu_data ({Path(last.filename).name}:{last.lineno} {last.name})"


def check(store: str, path: Path, device: torch.device, batches: int, crop: int) -> dict[str, Any]:
    from npu_data.bench import pillow_baseline as baseline
    from npu_data.loaders import DataLoader
    from npu_data.shards.reader import ShardDataset

    loader = DataLoader(ShardDataset(path), batch_size=32, shuffle=True, num_workers=0,
                        pin_memory=True, device=device, transform=baseline.augmentation(crop),
                        seed=0)
    syncs: Counter[str] = Counter()
    mode = _DeviceOps()
    it = iter(loader)
    next(it)  # warm-up: first-use work (library loads, allocator growth) is not the loop's
    dev.synchronize(device)
    seen = 0
    with warnings.catch_warnings(record=False):
        def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
            # torch's own words for a sync; its one-time notice that the sync debug mode is
            # a prototype says "synchronizing" too
            if "called a synchronizing" in str(message):
                syncs[_site()] += 1

        warnings.simplefilter("always")
        old = warnings.showwarning
        warnings.showwarning = show
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with mode:
                for b in it:
                    b["image"].sum()  # consume on the device, as a training step would
                    seen += 1
                    if seen >= batches:
                        break
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = old
    dev.synchronize(device)
    return {"store": store, "batches": seen, "syncs": syncs, "wide": mode.wide,
            "device_ops": sum(mode.ops.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args(argv)
    device = dev.resolve_device(a.device)
    if device.type != "cuda":  # a dry run: the loop and the table, nothing on a device to see
        print(f"device_rules: host syncs are counted on CUDA only; {device} is a dry run")
    from npu_data.bench.bench_data import ensure

    root = a.data_dir or tempfile.mkdtemp(prefix="npu-data-rules-")
    data = ensure(root, a.images, 500, 375)
    bad = False
    print(f"| store | batches | device ops | host syncs | float64 ops | device {device} |")
    print("|---|---|---|---|---|---|")
    for store, path in (("raw", data.raw), ("encoded", data.encoded)):
        if path is None:
            print(f"| {store} | not made: {data.import_error} | | | | |")
            bad = True
            continue
        r = check(store, path, device, a.batches, a.crop)
        syncs = "; ".join(f"{k} x{v}" for k, v in r["syncs"].most_common()) or "0"
        wide = "; ".join(f"{k} x{v}" for k, v in r["wide"].most_common()) or "0"
        print(f"| {store} | {r['batches']} | {r['device_ops']} | {syncs} | {wide} | |")
        bad = bad or bool(r["syncs"]) or bool(r["wide"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
