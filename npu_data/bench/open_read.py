"""Open a 1M-sample raw dataset (8x8 images) and random-read it: time, RSS, samples/s.

Run: ``python -m npu_data.bench.open_read [--n 1000000]``. The dataset is built directly with the
writer's table path (no image files): an 8x8 image per sample, one box each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

os.environ.setdefault("NPU_DATA_QUIET", "1")

from npu_data.annotations.table import TextColumnBuilder, empty_table  # noqa: E402
from npu_data.shards import image_payload as img  # noqa: E402
from npu_data.shards.format import ENC_RAW  # noqa: E402
from npu_data.shards.reader import ShardDataset  # noqa: E402
from npu_data.shards.writer import WriteOptions, write_dataset  # noqa: E402


def _table(n: int):  # type: ignore[no-untyped-def]
    t = empty_table(["bbox"], {"bbox": ["a"]})
    c = t.columns
    c["task_id"] = np.arange(n, dtype="<i8")
    c["width"] = np.full(n, 8, "<i4")
    c["height"] = np.full(n, 8, "<i4")
    refs = TextColumnBuilder()
    for _ in range(n):
        refs.append("x")
    c["image_ref.bytes"], c["image_ref.offsets"] = refs.finish()
    c["data_json.bytes"], c["data_json.offsets"] = np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    for g in ("polygons", "keypoints", "ellipses", "masks", "choices", "texts", "taxonomy",
              "scalars", "relations", "boxes"):
        c[f"{g}.offsets"] = np.zeros(n + 1, np.int64)
    c["boxes.offsets"] = np.arange(n + 1, dtype=np.int64)
    c["boxes.xywhr"] = np.tile([10.0, 10.0, 50.0, 50.0, 0.0], (n, 1))
    for k, dt in (("control", "<i2"), ("annotation", "<i8"), ("label", "<i4"), ("source", "u1")):
        c[f"boxes.{k}"] = np.zeros(n, dt)
    c["boxes.score"] = np.full(n, np.nan, "<f4")
    c["boxes.iscrowd"] = np.zeros(n, "u1")
    c["boxes.rid.bytes"], c["boxes.rid.offsets"] = np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    t.num_samples = n
    return t


def main() -> None:
    """Build, open, read; print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reads", type=int, default=20000)
    args = ap.parse_args()
    pixels = np.arange(8 * 8 * 3, dtype=np.uint8).tobytes()
    payload = img.Payload(pixels, 8, 8, 3, ENC_RAW, __import__("zlib").crc32(pixels))
    img.make_payload = lambda ref, o, fetched=None: payload  # type: ignore[assignment]  # fast path: no image files
    tmp = Path(tempfile.mkdtemp(prefix="npu-open-bench-"))
    try:
        t = time.perf_counter()
        write_dataset(_table(args.n), tmp / "ds", WriteOptions(shard_size=8192, workers=1))
        print(f"built {args.n} samples in {time.perf_counter() - t:.1f} s; manifest "
              f"{(tmp / 'ds' / 'manifest.json').stat().st_size / 1e6:.2f} MB")
        proc = psutil.Process()
        rss0 = proc.memory_info().rss
        t = time.perf_counter()
        ds = ShardDataset(tmp / "ds")
        dt = time.perf_counter() - t
        print(f"open: {dt * 1000:.1f} ms, RSS +{(proc.memory_info().rss - rss0) / 1e6:.1f} MB, "
              f"len {len(ds)}")
        idx = np.random.default_rng(0).integers(0, len(ds), args.reads)
        t = time.perf_counter()
        for i in idx:
            ds[int(i)]
        dt = time.perf_counter() - t
        print(f"random read: {args.reads / dt:.0f} samples/s (first touch of shards included), "
              f"RSS +{(proc.memory_info().rss - rss0) / 1e6:.1f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
