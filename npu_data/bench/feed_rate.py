"""Feed benchmark: raw 256-px shards → pinned host batches (no augmentation), img/s.

    python -m npu_data.bench.feed_rate [--images 4096] [--batch 128] [--workers 2] [--epochs 3]
                           [--source shards|memmap] [--read batched|per-sample]
                           [--locality-block K] [--cold]

``--source shards`` imports a generated project into raw shards (npu_data's writer) and reads
them through ShardDataset, a batch at a time (``__getitems__``; ``--read per-sample`` hides it
so every sample is read alone, as before the batched read); ``--source memmap`` reads the same
pixels from one flat memory map (the loader alone, without the shard reader). ``--cold`` drops the page cache before each
epoch (``/proc/sys/vm/drop_caches``; needs root, reported when it fails) to show when
``--locality-block`` helps. Prints one line per epoch and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from npu_data import device as dev
from npu_data.loaders import DataLoader, NpuDistributedSampler


class MemmapImages:
    """N raw (S, S, 3) images in one flat memory map (sample dicts like ShardDataset's)."""

    def __init__(self, path: Path, n: int, side: int) -> None:
        self.path, self.n, self.side = path, n, side
        self._mm: np.ndarray | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._mm is None:
            self._mm = np.memmap(self.path, np.uint8, "r", shape=(self.n, self.side, self.side, 3))
        return {"image": self._mm[i], "index": int(i), "task_id": int(i)}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mm": None}


class PerSample:
    """``dataset`` without ``__getitems__``: torch's DataLoader reads one sample at a time."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.dataset[i]


def make_memmap(root: Path, n: int, side: int) -> MemmapImages:
    path = root / f"raw_{n}_{side}.u8"
    if not path.exists() or path.stat().st_size != n * side * side * 3:
        rng = np.random.default_rng(0)
        mm = np.memmap(path, np.uint8, "w+", shape=(n, side, side, 3))
        for a in range(0, n, 256):
            mm[a:a + 256] = rng.integers(0, 256, mm[a:a + 256].shape, dtype=np.uint8)
        mm.flush()
        del mm
    return MemmapImages(path, n, side)


def make_shards(root: Path, n: int, side: int) -> Any:
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset
    from npu_data.tools.sample_data import make_bench_images

    out = root / f"shards_{n}_{side}"
    if not (out / "manifest.json").is_file():
        proj = make_bench_images(root / f"jpeg_{n}_{side}", n=n, width=side, height=side)
        opts = WriteOptions(store="raw", workers=2, images=image_options(proj.export_path))
        write_dataset(proj.export_path, out, opts)
    return ShardDataset(out)


def drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("1\n")
        return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=4096)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--source", choices=("shards", "memmap"), default="shards")
    p.add_argument("--read", choices=("batched", "per-sample"), default="batched")
    p.add_argument("--locality-block", type=int, default=None)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "npu-data-bench"))
    a = p.parse_args(argv)
    root = Path(a.work_dir)
    root.mkdir(parents=True, exist_ok=True)
    ds = (make_shards(root, a.images, a.side) if a.source == "shards"
          else make_memmap(root, a.images, a.side))
    if a.read == "per-sample":
        ds = PerSample(ds)
    sampler = NpuDistributedSampler(ds, num_replicas=1, rank=0, seed=0,
                                    locality_block=a.locality_block)
    loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                        pin_memory=True, prefetch_factor=4,
                        # pages mapped by live workers survive drop_caches: restart them cold
                        persistent_workers=not a.cold,
                        device="cpu", device_prefetch=0)
    print(f"feed: {len(ds)} images {a.side}px from {a.source} ({a.read}), batch {a.batch}, "
          f"{a.workers} workers, locality_block={a.locality_block}, pinned "
          f"{dev.pin_memory_supported(dev.best_device_type())}, cold={a.cold}")
    rates = []
    for epoch in range(a.epochs + 1):  # epoch 0 warms workers (and the cache unless --cold)
        sampler.set_epoch(epoch)
        if a.cold and not drop_caches():
            print("  drop_caches refused (not root?): the cache stays warm")
            a.cold = False
        t = time.perf_counter()
        n = sum(int(b["image"].shape[0]) for b in loader)
        dt = time.perf_counter() - t
        if epoch:
            rates.append(n / dt)
            print(f"  epoch {epoch}: {n / dt:8.0f} img/s ({n} images in {dt:.2f} s)")
    print(f"median {statistics.median(rates):.0f} img/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
