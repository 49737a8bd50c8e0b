"""Import throughput (images/s): raw and encoded stores, 1 and 2 workers, 500x375 JPEGs.

Run: ``python -m npu_data.bench.import_bench [--n 300] [--brush K]``; ``--brush K`` adds K brush masks
(500x375, npu_data/bench/brush.py) to every task: the brush-heavy export, where decoding the masks'
RLE is a large part of the import.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NPU_DATA_QUIET", "1")

from npu_data.annotations import parse_export  # noqa: E402
from npu_data.annotations.images import ImageOptions  # noqa: E402
from npu_data.bench.brush import brush_results, rle_pool  # noqa: E402
from npu_data.shards.writer import WriteOptions, write_dataset  # noqa: E402
from npu_data.tools.sample_data import make_bench_images  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print one line per (store, workers); ``argv`` as on the command line."""
    ap = argparse.ArgumentParser(prog="npu-data bench import")
    ap.add_argument("--n", type=int, default=300, help="images (default %(default)s)")
    ap.add_argument("--brush", type=int, default=0, metavar="K",
                    help="brush masks per image (default %(default)s)")
    ap.add_argument("--stores", default="raw,encoded", help="default %(default)s")
    ap.add_argument("--workers", default="1,2", help="default %(default)s")
    args = ap.parse_args(argv)
    if args.n < 1 or args.brush < 0:
        ap.error("--n must be at least 1, --brush at least 0")
    stores = args.stores.split(",")
    if not set(stores) <= {"raw", "encoded"}:
        ap.error("--stores: raw and/or encoded")
    try:
        workers_list = [int(w) for w in args.workers.split(",")]
    except ValueError:
        ap.error("--workers: a comma-separated list of numbers")
    tmp = Path(tempfile.mkdtemp(prefix="npu-import-bench-"))
    try:
        proj = make_bench_images(tmp / "proj", n=args.n)
        if args.brush:
            add_brush(proj.export_path, args.brush)
        t = time.perf_counter()
        parsed = parse_export(proj.export_path)
        dt = time.perf_counter() - t
        print(f"export: {args.n} images 500x375, {args.brush} brush masks each; parse "
              f"{dt:.2f} s ({parsed.table.count('masks')} masks decoded)")
        for store in stores:
            for workers in workers_list:
                out = tmp / f"{store}-{workers}"
                t = time.perf_counter()
                s = write_dataset(proj.export_path, out, WriteOptions(
                    store=store, workers=workers, shard_size=64,
                    images=ImageOptions(images_root=proj.root)))
                dt = time.perf_counter() - t
                print(f"store={store:<8} workers={workers}  {s.samples / dt:8.1f} images/s  "
                      f"({s.samples} images, {s.bytes / 1e6:.1f} MB, {dt:.2f} s)")
                shutil.rmtree(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def add_brush(export: Path, k: int, width: int = 500, height: int = 375) -> None:
    """Append ``k`` brush masks to the annotation of every task of ``export``."""
    tasks = json.loads(export.read_text(encoding="utf-8"))
    pool = rle_pool(width, height)
    for i, task in enumerate(tasks):
        task["annotations"][0]["result"] += brush_results(pool, i, k, width, height)
    export.write_text(json.dumps(tasks), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
