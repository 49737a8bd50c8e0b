"""``npu-data demo``: sample project -> shards -> augmented batches on the best device."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from npu_data import device as dev
from npu_data.errors import UserError

NAME = "demo"
HELP = ("Run the whole pipeline on built-in sample data: generate a Label Studio project, "
        "import it, stream augmented batches on the best device, write preview.png and "
        "preview-geometry.png.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data demo``."""
    p.add_argument("--out", default="npu-data-demo", metavar="DIR",
                   help="folder for the sample project, shards and preview (default: %(default)s)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda|npu",
                   help="where augmentation runs (default: auto = npu, then cuda, then cpu)")
    p.add_argument("--images", type=int, default=24, metavar="N",
                   help="sample images to generate (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=8, metavar="B",
                   help="batch size (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="DataLoader worker processes for both pipelines (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=2, metavar="E",
                   help="measured epochs per pipeline after one warm-up (default: %(default)s)")


def _device(spec: str) -> tuple[Any, str]:
    device = dev.resolve_device(spec)
    why = ""
    if spec == "auto" and device.type != "npu":
        why = f" (no NPU: {dev.npu_import_error()}"
        why += ")" if device.type == "cuda" else "; no CUDA device)"
    return device, f"device: {dev.describe(device)}{why}"


def _epoch(loader: Any, device: Any) -> float:
    t, n = time.perf_counter(), 0
    for b in loader:
        n += int((b["image"] if isinstance(b, dict) else b).shape[0])
    dev.synchronize(device)
    return n / (time.perf_counter() - t)


def run(args: argparse.Namespace) -> int:
    """Generate, import, inspect, stream, compare and draw."""
    if args.images < 1 or args.batch_size < 1 or args.workers < 0 or args.epochs < 1:
        raise UserError("demo: --images, --batch-size and --epochs must be >= 1 and "
                        "--workers >= 0")
    from npu_data.bench import pillow_baseline as baseline
    from npu_data.commands import inspect
    from npu_data.loaders import DataLoader
    from npu_data.previews.batch_grid import preview_batch, preview_geometry
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset
    from npu_data.tools.sample_data import make_sample_project

    out = Path(args.out)
    device, where = _device(args.device)
    proj = make_sample_project(out / "project", n_images=args.images)
    print(f"1. sample project: {args.images} images and a Label Studio export in {proj.root}")
    shards = out / "shards"
    s = write_dataset(proj.export_path, shards, WriteOptions(
        store="raw", images=image_options(proj.export_path), config=str(proj.config_path)))
    print(f"2. imported {s.samples} of {s.tasks} tasks into {s.out_dir} "
          f"({s.shards} shard(s), {s.bytes / 1e6:.1f} MB raw pixels, {s.rejected} rejected)")
    print("3. npu-data inspect:")
    inspect.run(argparse.Namespace(dataset=str(shards)))
    ds = ShardDataset(shards)
    augment = baseline.augmentation(224)
    print(f"4. {where}\n   augmentation: {augment!r}")
    ours = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                      pin_memory=True, persistent_workers=args.workers > 0, device=device,
                      transform=augment, seed=0)
    base = baseline.loader(baseline.image_files(proj.root), args.batch_size, args.workers)
    first = next(iter(ours))
    _epoch(base, dev.resolve_device("cpu"))
    r_ours, r_base = [], []
    for _ in range(args.epochs):
        r_ours.append(_epoch(ours, device))
        r_base.append(_epoch(base, dev.resolve_device("cpu")))
    mo, mb = statistics.median(r_ours), statistics.median(r_base)
    print(f"5. throughput (median of {args.epochs} epochs, batch {args.batch_size}, "
          f"{args.workers} worker(s); a quick look — `npu-data bench` measures properly):\n"
          f"   npu-data (raw shards, batched on {device.type}): {mo:8.1f} img/s\n"
          f"   baseline (JPEG + Pillow per sample, CPU):    {mb:8.1f} img/s   ratio {mo / mb:.2f}x")
    picture = preview_batch(first, ds.labels, ds.controls, limit=8, cols=4,
                            title=f"augmented batch on {device}: RandomResizedCrop(224) + "
                                  "ColorJitter(0.4, 0.4, 0.4, 0.1) + flip")
    path = out / "preview.png"
    picture.save(path)
    print(f"6. preview of an augmented batch with its boxes and captions: {path}")
    path = out / "preview-geometry.png"
    preview_geometry(first, ds.labels, ds.controls, limit=4).save(path)
    print(f"7. the geometric transforms on that batch, annotations moved with the pixels: {path}")
    return 0
