"""End-to-end loader benchmark, two pipelines side by side in one run (a short ``bench``).

    python -m npu_data.bench.pipeline [--images 512] [--batch 64] [--workers 2] [--epochs 3]
                               [--with encoded,webdataset] [--threads N]

ours:     DataLoader over raw shards + device Compose([RandomResizedCrop(224),
          ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()]) on whole batches
baseline: torch DataLoader reading the JPEG files, Pillow decode and the same augmentation
          per sample with the CPU reference, boxes moved in numpy (npu_data.bench.pillow_baseline)
Epochs are interleaved (``npu_data.bench.suite.measure``); the median img/s of each is printed, then
each pipeline's stage breakdown (``npu_data.bench.stage_times``, the same timing ``npu-data bench`` reports).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

from npu_data import device as dev
from npu_data.bench import stage_times as stages
from npu_data.bench import suite
from npu_data.bench.bench_data import ensure


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--with", dest="extra", default="",
                   help="more pipelines, comma-separated: encoded, webdataset")
    p.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "npu-data-bench"))
    a = p.parse_args(argv)
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    cfg = suite.BenchConfig(images=a.images, batch_size=a.batch, workers=a.workers,
                            epochs=a.epochs, device=a.device, threads=a.threads)
    device = dev.resolve_device(cfg.device)
    data = ensure(Path(a.work_dir), cfg.images, cfg.width, cfg.height, cfg.seed)
    extra = {f"npu_data_{x}" if x == "encoded" else x for x in a.extra.split(",") if x}
    runs = [r for r in suite.pipelines(data, cfg, device)[0]
            if r.name in {"baseline", "npu_data_raw", *extra}]
    print(f"pipeline: {cfg.images} JPEGs {cfg.width}x{cfg.height}, batch {cfg.batch_size}, "
          f"{cfg.workers} workers each, device {dev.describe(device)}")
    for r in suite.measure(runs, cfg, device):
        st = r["stages_ms_per_img"]
        print(f"  {r['label']:<45} median {r['median_img_s']:7.0f} img/s "
              f"({r['min_img_s']:.0f}-{r['max_img_s']:.0f}), {r['ratio_to_baseline']:.2f}x")
        print("    ms/img: " + ", ".join(f"{k} {st[k]:.3f}" for k in stages.STAGES if k in st)
              + f"; bound by {r['bound_by']} ({r['bound_kind']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
