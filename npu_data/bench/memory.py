"""Memory over epochs: one npu-data pipeline alone, anonymous resident memory of the main
process and of its workers after every epoch (issue 11's "memory flat over epochs").

    python -m npu_data.bench.memory [--store raw|encoded|wds] [--workers 0] [--epochs 8]
                             [--images 2000] [--width 500 --height 375 --crop 224]
                             [--data-dir /tmp/npu-data-bench]

The suite (``npu-data bench``) holds every pipeline's loader in one process, so its main
process grows with all of them together; this runs one. Anonymous memory (``RssAnon``: heap,
batch buffers) is what a leak grows; the file pages of memory-mapped shards are not in it.
Prints one line per epoch and whether the last half of the epochs grew past the first half.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import psutil

from npu_data.bench.bench_data import ensure
from npu_data.bench.suite import _anon


def _loader(root: Path, tars: list[Path] | None, store: str, workers: int, crop: int) -> Any:
    from npu_data.bench import pillow_baseline as baseline
    from npu_data.formats.webdataset.stream import WebDatasetStream
    from npu_data.loaders import DataLoader
    from npu_data.shards.reader import ShardDataset

    if store == "wds":
        ds: Any = WebDatasetStream([str(t) for t in tars or []], shuffle=True, seed=0, buffer=64)
    else:
        ds = ShardDataset(root)
    return DataLoader(ds, batch_size=64, shuffle=store != "wds", num_workers=workers,
                      persistent_workers=workers > 0, device="cpu",
                      transform=baseline.augmentation(crop), seed=0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", choices=("raw", "encoded", "wds"), default="raw")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--width", type=int, default=500)
    p.add_argument("--height", type=int, default=375)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--data-dir", default="/tmp/npu-data-bench")
    a = p.parse_args(argv)
    if a.epochs < 2 or a.workers < 0:
        p.error("--epochs must be at least 2 and --workers at least 0")
    data = ensure(a.data_dir, a.images, a.width, a.height)
    root = data.raw if a.store == "raw" else data.encoded
    loader = _loader(Path(str(root)), data.tars, a.store, a.workers, a.crop)
    me, rows = psutil.Process(), []
    for e in range(a.epochs):
        loader.set_epoch(e)
        for _ in loader:
            pass
        kids = me.children(recursive=True)
        main_mib, workers_mib = _anon(me) >> 20, sum(_anon(c) for c in kids) >> 20
        rows.append(main_mib + workers_mib)
        print(f"epoch {e}: main {main_mib} MiB + workers {workers_mib} MiB (anonymous)",
              flush=True)
    half = len(rows) // 2
    first, last = max(rows[:half]), max(rows[half:])
    print(f"{a.store}, {a.workers} worker(s): first half peak {first} MiB, last half {last} MiB"
          f" ({'flat' if last <= first * 1.05 + 16 else 'GROWING'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
