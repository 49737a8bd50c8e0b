"""``npu-data bench``: the throughput suite (``npu_data.bench.suite``) and the parse, import and
remote benches."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

from npu_data.errors import UserError

NAME = "bench"
HELP = ("Measure images/s of npu-data (raw shards, encoded shards, WebDataset tars) against "
        "torchvision's PIL pipeline (or, without torchvision, the per-sample Pillow reference; "
        "interleaved epochs, boxes carried along); writes "
        "results.json, results.md and chart.png. `bench parse|import ...` runs the parse or "
        "import benchmark; `bench sources` the import time of each source format; `bench "
        "remote` the feed rate from a loopback S3 server; `bench sdxl-vae` samples/s from "
        "pixels through an SDXL-sized VAE against from a latents store.")

_SUB = {"parse": "npu_data.bench.parse", "import": "npu_data.bench.import_bench",
        "sources": "npu_data.bench.import_sources", "remote": "npu_data.bench.remote",
        "sdxl-vae": "npu_data.bench.sdxl_vae"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data bench``."""
    p.add_argument("suite", nargs="?", choices=("run", *_SUB), default="run",
                   help="run (default): the pipeline suite; parse / import / sources / remote / "
                        "sdxl-vae: those "
                        "benches "
                        "(their own arguments follow)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--out", default="bench-results", metavar="DIR",
                   help="where results.json, results.md and chart.png go (default: %(default)s)")
    p.add_argument("--data-dir", metavar="DIR",
                   default=os.path.join(tempfile.gettempdir(), "npu-data-bench"),
                   help="generated dataset cache, reused when it matches (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="a small smoke run (under a minute): 16 images 128x96, crop 64, batch 8")
    p.add_argument("--images", type=int, metavar="N", help="images (default 2000)")
    p.add_argument("--width", type=int, metavar="W", help="image width (default 500)")
    p.add_argument("--height", type=int, metavar="H", help="image height (default 375)")
    p.add_argument("--crop", type=int, metavar="S", help="RandomResizedCrop size (default 224)")
    p.add_argument("--batch-size", type=int, metavar="B", help="batch size (default 64)")
    p.add_argument("--workers", type=int, metavar="N", help="workers per pipeline (default 2)")
    p.add_argument("--epochs", type=int, metavar="E", help="measured epochs (default 3)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda|npu")
    p.add_argument("--decode", choices=("exact", "fast"), default="exact",
                   help="npu-data's JPEG decoding: exact (default, Pillow's pixels) or fast "
                        "(DCT-scaled where a crop box is at least twice the output)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch threads of the main process (default: torch's; 1 avoids "
                        "oversubscribing a small, busy machine)")
    p.add_argument("--sweep", action="store_true",
                   help="also sweep workers (0, 1, 2, 4, ... up to the CPU count), batch size, "
                        "crop size and input image size for the baseline, raw shards and "
                        "WebDataset")


def run(args: argparse.Namespace) -> int:
    """Run the suite (or a sub-bench) and write the report files."""
    if args.suite != "run":
        try:
            mod = importlib.import_module(_SUB[args.suite])
        except ModuleNotFoundError as exc:
            raise UserError(f"bench {args.suite}: the module {exc.name} is not installed — "
                            "install the package that provides it") from None
        return int(mod.main(list(args.rest)) or 0)
    if args.rest:
        raise UserError(f"bench: unexpected arguments {' '.join(args.rest)}")
    from npu_data.bench import report, suite

    over = {"images": args.images, "width": args.width, "height": args.height,
            "crop": args.crop, "batch_size": args.batch_size, "workers": args.workers,
            "epochs": args.epochs, "device": args.device, "threads": args.threads,
            "decode": args.decode}
    for key in ("images", "width", "height", "crop", "batch_size", "epochs", "threads"):
        if over[key] is not None and over[key] < 1:
            raise UserError(f"bench: --{key.replace('_', '-')} must be at least 1")
    if args.workers is not None and args.workers < 0:
        raise UserError("bench: --workers must be 0 or more")
    cfg = (suite.BenchConfig.quick(**over) if args.quick else suite.BenchConfig(
        **{k: v for k, v in over.items() if v is not None}))
    sweeps = suite.default_sweeps(quick=args.quick) if args.sweep else None
    results = suite.run(cfg, Path(args.data_dir), sweeps=sweeps)
    paths = report.write_all(results, args.out)
    print(f"wrote {paths['json']}, {paths['md']} and {paths['chart']}")
    return _failed_own(results)


def _failed_own(results: dict) -> int:
    """1 (and one line each) when one of npu-data's own pipelines could not be built; peers
    that are not installed (Kornia, DALI, ...) may be skipped."""
    from npu_data.bench import extras

    peers = {x["name"] for x in extras.status()} | {"torchvision"}
    failed = [p for p in results.get("pipelines", [])
              if p.get("status") == "skipped" and p.get("name") not in peers]
    for p in failed:
        print(f"error: bench: pipeline '{p['label']}' could not be built: {p['reason']}",
              file=sys.stderr)
    return 1 if failed else 0
