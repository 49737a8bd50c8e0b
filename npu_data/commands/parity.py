"""``npu-data parity``: device kernels vs the Pillow CPU versions, kernel by kernel; with
``--transform``, a user's transform against its own reference (``npu_data.parity.check_all``)."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from npu_data.errors import UserError

NAME = "parity"
HELP = ("Run every augmentation kernel on random padded batches on a device and compare each "
        "sample with the Pillow reference, the device kernels also under TF32/HF32, bf16 "
        "matmuls and bf16 autocast; or, with --transform, your own transform against its "
        "reference (exit 1 if any row is outside its tolerance).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data parity``."""
    p.add_argument("--device", default="auto",
                   help="auto (npu, then cuda, then cpu), cpu, cuda[:N] or npu[:N] "
                        "(default: auto)")
    p.add_argument("--seed", type=int, default=0, help="seed of images and parameters (0)")
    p.add_argument("--batches", type=int, default=2, help="random batches per kernel (2)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (8)")
    p.add_argument("--precision", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the torch kernels under each reduced-precision mode "
                        "(rows '<kernel> (torch, <mode>)', expected exact; default: on)")
    p.add_argument("--transform", action="append", metavar="MODULE:NAME",
                   help="check this transform instead of the built-in kernels (repeatable): "
                        "MODULE an importable module (the current folder first) or a .py "
                        "file, NAME a Transform subclass made with no arguments, a transform "
                        "object or a function of no arguments returning one. Importing it "
                        "runs that file's code, as `python file.py` or `torchrun file.py` "
                        "would: name only code you trust. Rows: the transform alone (keyed "
                        "draws, each sample against its reference), in a pipeline with a "
                        "crop before it and a flip after it, and that pipeline through the "
                        "DataLoader over a small generated store (crop at read, after read, "
                        "geometry)")
    p.add_argument("--tolerance", type=float, nargs=2, default=(0.0, 0.0),
                   metavar=("MAX", "MEAN"),
                   help="with --transform: the largest and the mean difference allowed, in "
                        "8-bit levels (default: 0 0, exact)")


def run(args: argparse.Namespace) -> int:
    """Print the table and the device; 0 when every row passes, 1 otherwise."""
    from npu_data.device import describe, resolve_device

    if args.batches < 1 or args.batch_size < 1:
        raise UserError(f"--batches and --batch-size must be at least 1, got {args.batches} "
                        f"and {args.batch_size}")
    device = resolve_device(args.device)
    print(f"device: {describe(device)}  seed: {args.seed}  batches: {args.batches}")
    if args.transform:
        rows = _transform_rows(args, device)
    else:
        from npu_data.parity.runner import run_parity_suite

        rows = run_parity_suite(device, seed=args.seed, batches=args.batches,
                                batch_size=args.batch_size, precision=args.precision)
    header = ("kernel", "max diff", "mean diff", "frac >1", "tolerance", "result")
    table = [header] + [
        (r.kernel, f"{r.max:g}", f"{r.mean:.4g}", f"{r.frac:.3%}", r.tolerance,
         "PASS" if r.passed else "FAIL")
        for r in rows
    ]
    widths = [max(len(line[c]) for line in table) for c in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    failed = [r.kernel for r in rows if not r.passed]
    if failed:
        print(f"FAIL: {', '.join(failed)} outside tolerance on {describe(device)}")
        return 1
    print(f"all {len(rows)} {'rows' if args.transform else 'kernels'} within tolerance")
    return 0


def _transform_rows(args: argparse.Namespace, device: Any) -> list[Any]:
    """``check_all`` of each ``--transform`` (all loaded first: a bad spec fails at once)
    over a small sample store written to a temporary folder."""
    from npu_data.parity.check import check_all, pipeline_for
    from npu_data.parity.load import load_transform, where

    max_diff, mean_diff = args.tolerance
    if max_diff < 0 or mean_diff < 0:
        raise UserError(f"--tolerance must be two numbers >= 0, got {max_diff:g} {mean_diff:g}")
    transforms = [(spec, load_transform(spec)) for spec in args.transform]
    rows: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="npu-data-parity-") as tmp:
        dataset = _sample_store(Path(tmp), args.seed)
        for spec, t in transforms:
            pipeline = pipeline_for(t)
            print(f"{spec}: {t!r}, " + ("a pipeline that starts with a crop, as it is"
                                        if pipeline is t else f"in the pipeline {pipeline!r}"))
            try:
                rows += check_all(t, dataset, seed=args.seed, batches=args.batches,
                                  batch_size=args.batch_size, device=device,
                                  tolerance=(max_diff, mean_diff))
            except UserError as exc:
                raise UserError(f"{{transform}} {spec}: {exc}", option="transform") from None
            except NotImplementedError as exc:  # a name of the contract it lacks
                raise UserError(f"{{transform}} {spec}: {exc} — define it (docs/architecture.md"
                                ", \"Writing a transform\")", option="transform") from None
            except Exception as exc:  # the user's code raised: one line, where
                raise UserError(f"{{transform}} {spec}: checking {t!r} raised {where(exc)}",
                                option="transform") from None
    return rows


def _sample_store(root: Path, seed: int) -> Any:
    """A raw store of a few small generated images with boxes, keypoints, polygons and
    masks (``tools.sample_data``)."""
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset
    from npu_data.tools.sample_data import make_sample_project

    quiet = os.environ.get("NPU_DATA_QUIET")
    os.environ["NPU_DATA_QUIET"] = "1"  # its progress is not what was asked for
    try:
        project = make_sample_project(root / "project", n_images=8, width=96, height=72,
                                      seed=seed)
        write_dataset(project.export_path, root / "shards", WriteOptions(
            store="raw", images=image_options(project.export_path),
            config=str(project.config_path)))
    finally:
        if quiet is None:
            del os.environ["NPU_DATA_QUIET"]
        else:
            os.environ["NPU_DATA_QUIET"] = quiet
    return ShardDataset(root / "shards")
