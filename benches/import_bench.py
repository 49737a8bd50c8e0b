"""Import throughput (images/s): raw and encoded stores, 1 and 2 workers, 500x375 JPEGs.

Run: ``python -m benches.import_bench [--n 300]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NPU_DATA_QUIET", "1")

from npu_data.annotations.images import ImageOptions  # noqa: E402
from npu_data.sample_data import make_bench_images  # noqa: E402
from npu_data.shards.writer import WriteOptions, write_dataset  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print one line per (store, workers); ``argv`` as on the command line."""
    ap = argparse.ArgumentParser(prog="npu-data bench import")
    ap.add_argument("--n", type=int, default=300, help="images (default %(default)s)")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be at least 1")
    tmp = Path(tempfile.mkdtemp(prefix="npu-import-bench-"))
    try:
        proj = make_bench_images(tmp / "proj", n=args.n)
        for store in ("raw", "encoded"):
            for workers in (1, 2):
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


if __name__ == "__main__":
    raise SystemExit(main())
