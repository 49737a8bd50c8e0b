"""Crop at read on WebDataset tars, A/B: a ``WebDatasetStream`` into our DataLoader with
``read_crop=False`` (every JPEG decoded whole in the stream, the crop in the main process) and
``read_crop=True`` (only each JPEG's header read in the stream, its crop box decoded and
resized into the batch by the worker's collate), epochs interleaved so both see the same
machine load.

    python -m npu_data.bench.wds_read_crop --tars DIR [--epochs 6] [--workers 2] [--batch-size 64]
                                    [--crop 224] [--decode exact|fast]

``DIR`` holds the tars (``npu-data bench`` writes them under
``<data-dir>/bench_<n>_<w>x<h>_s0/wds``). Set up as the bench suite's webdataset row
(``npu_data.bench.suite._wds``): tar order shuffled per worker, a one-batch sample window,
persistent workers, prefetch 4, RandomResizedCrop + ColorJitter + flip on the CPU. Each
loader runs one warm-up epoch first; the report gives every epoch's img/s and CPU ms per
image (main process and workers, from ``/proc``: less sensitive than img/s to other load on
a shared machine) and their medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from npu_data.bench import pillow_baseline as baseline


def loader(tars: list[str], read_crop: bool, args: argparse.Namespace) -> Any:
    from npu_data.formats.webdataset.stream import WebDatasetStream
    from npu_data.loaders import DataLoader

    stream = WebDatasetStream(tars, shuffle=True, seed=0, buffer=args.batch_size)
    return DataLoader(stream, batch_size=args.batch_size, num_workers=args.workers,
                      pin_memory=True, persistent_workers=args.workers > 0,
                      prefetch_factor=4 if args.workers else None, device="cpu",
                      transform=baseline.augmentation(args.crop), seed=0,
                      read_crop=read_crop, decode=args.decode)


def cpu_seconds(dl: Any) -> float:
    """CPU seconds so far of this process and of ``dl``'s (persistent) worker processes."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for w in getattr(getattr(dl, "_iterator", None), "_workers", []):
        try:
            fields = Path(f"/proc/{w.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def epoch(dl: Any, number: int) -> tuple[float, float, int]:
    """(img/s, CPU ms per image, images) of one pass at epoch ``number``."""
    dl.set_epoch(number)
    n = 0
    c0, t0 = cpu_seconds(dl), time.perf_counter()
    for batch in dl:
        n += int(batch["image"].shape[0])
    wall, cpu = time.perf_counter() - t0, cpu_seconds(dl) - c0
    return n / wall, cpu / n * 1e3, n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tars", type=Path, required=True)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--decode", choices=("exact", "fast"), default="exact")
    args = ap.parse_args(argv)
    tars = sorted(str(p) for p in args.tars.glob("*.tar"))
    if not tars:
        raise SystemExit(f"{args.tars}: no .tar files")
    runs = {"read_crop=False": loader(tars, False, args),
            "read_crop=True": loader(tars, True, args)}
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    for dl in runs.values():  # warm-up: workers started, kernels compiled
        epoch(dl, 0)
    for e in range(1, args.epochs + 1):
        order = list(runs) if e % 2 else list(reversed(runs))  # ABBA: neither always first
        for name in order:
            rate, cpu, n = epoch(runs[name], e)
            rates[name].append(rate)
            cpus[name].append(cpu)
            print(f"epoch {e} {name:16s} {n} images {rate:7.1f} img/s {cpu:6.2f} CPU ms/img",
                  flush=True)
    base = statistics.median(rates["read_crop=False"])
    base_cpu = statistics.median(cpus["read_crop=False"])
    for name, r in rates.items():
        med, c = statistics.median(r), statistics.median(cpus[name])
        print(f"{name:16s} median {med:7.1f} img/s (min {min(r):.1f}, max {max(r):.1f}) "
              f"x{med / base:.2f}; {c:.2f} CPU ms/img (x{base_cpu / c:.2f} less)")


if __name__ == "__main__":
    main()
