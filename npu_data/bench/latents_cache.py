"""Training from a latents store against training from pixels: what each step's inputs cost
the trainer, and what each stores per sample.

    python -m npu_data.bench.latents_cache [--images 48] [--scale 0.25] [--batch-size 4]
                                    [--epochs 2] [--device auto] [--vae tiny|sdxl]
    python -m npu_data.bench.latents_cache --quick     # tiny sizes: checks that it runs

Both take the same ``BucketBatchSampler`` batches of mixed-aspect photos
(``aigc_buckets.make_photos``), SDXL's buckets scaled by ``--scale``:

pixels: DataLoader over raw shards + Compose([ResizeCrop(None), RandomHorizontalFlip(),
        Normalize(0.5, 0.5)]) on ``--device``, then the frozen VAE's
        ``latent_dist.mean * scaling_factor`` there (what a pixel pipeline runs every step)
cache:  DataLoader over the latents store (``encode_latents``, bfloat16, flipped variants)
        + RandomLatentFlip, the latents moved to ``--device``

The VAE has random weights built from a config: ``tiny`` (4 blocks of 8 channels) or
``sdxl`` (SDXL's VAE config: 128-512 channels, 2 layers per block; the encoder's cost is the
real one's). Passes are interleaved (one warm-up each); the medians are printed, with the
bytes per sample of the source JPEGs, the raw shards and the store.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from npu_data.bench.aigc_buckets import make_photos


def build_vae(kind: str) -> Any:
    """A random-weight diffusers AutoencoderKL: ``tiny`` or ``sdxl`` (SDXL's config)."""
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    if kind == "sdxl":
        return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                             down_block_types=("DownEncoderBlock2D",) * 4,
                             up_block_types=("UpDecoderBlock2D",) * 4,
                             block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                             norm_num_groups=32, scaling_factor=0.13025, sample_size=1024)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                         down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4,
                         block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4)


def bytes_under(root: Path) -> int:
    """The bytes of the files below ``root``."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def side_by_side(pixels: Any, store: Any, store_name: str, store_pipe: Any,
                 buckets: Sequence[tuple[int, int]], batch_size: int,
                 device: torch.device) -> dict[str, tuple[Any, Any]]:
    """``{"pixels": (loader, sampler), store_name: (loader, sampler)}``: the pixel shards
    through ResizeCrop to ``buckets``, flip and Normalize, and the latents ``store`` through
    ``store_pipe``, each batched by its own bucket sampler (seed 0)."""
    from npu_data.loaders import BucketBatchSampler, DataLoader
    from npu_data.transforms import Compose, Normalize, RandomHorizontalFlip, ResizeCrop

    runs: dict[str, tuple[Any, Any]] = {}
    for name, ds, pipe in (
            ("pixels", pixels, Compose([ResizeCrop(None, buckets=buckets),
                                        RandomHorizontalFlip(), Normalize(0.5, 0.5)])),
            (store_name, store, store_pipe)):
        sampler = BucketBatchSampler(ds, batch_size, buckets, seed=0)
        runs[name] = (DataLoader(ds, batch_sampler=sampler, transform=pipe, device=device,
                                 seed=0), sampler)
    return runs


def vae_step(vae: Any) -> Any:
    """A batch's latents made from its pixels by ``vae`` (the mean, scaled)."""

    @torch.no_grad()
    def from_pixels(batch: dict[str, Any]) -> torch.Tensor:
        return vae.encode(batch["image"]).latent_dist.mean * vae.config.scaling_factor

    return from_pixels


def one_pass(loader: Any, step: Any, device: torch.device) -> float:
    """Samples per second of one pass, each batch's latents made by ``step``."""
    from npu_data import device as dev

    n, t0 = 0, time.perf_counter()
    for batch in loader:
        n += step(batch).shape[0]
    dev.synchronize(device)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    from npu_data import device as dev
    from npu_data.buckets import bucket_list
    from npu_data.latents import encode_latents
    from npu_data.shards.importer import import_dataset
    from npu_data.shards.reader import ShardDataset
    from npu_data.transforms import RandomLatentFlip

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--scale", type=float, default=0.25, help="photo and bucket size factor")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--vae", choices=("tiny", "sdxl"), default="tiny")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a check that it runs")
    ap.add_argument("--work-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "npu-data-bench-latents")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.scale, args.epochs, args.batch_size = 8, 0.05, 1, 2
    device = dev.resolve_device(args.device)
    work = args.work_dir / f"n{args.images}_s{args.scale:g}"
    export = make_photos(work / "photos", args.images, args.scale)
    shards = work / "shards_raw"
    if not (shards / "manifest.json").is_file():
        import_dataset(export, shards, store="raw")
    buckets = bucket_list("sdxl", size=max(64, round(1024 * args.scale)), step=64
                          if args.scale >= 0.25 else 8)
    vae = build_vae(args.vae).to(device).eval().requires_grad_(False)
    store = work / f"latents_{args.vae}_{device.type}"
    t0 = time.perf_counter()
    cache = encode_latents(shards, store, vae, buckets=buckets, batch_size=args.batch_size,
                           device=device, resume=store.exists()) \
        if not (store / "manifest.json").is_file() else ShardDataset(store)
    encode_s = time.perf_counter() - t0
    pixels = ShardDataset(shards)
    runs = side_by_side(pixels, cache, "cache", RandomLatentFlip(), buckets, args.batch_size,
                        device)

    def from_cache(batch: dict[str, Any]) -> torch.Tensor:
        return batch["latents"].to(device, torch.float32, non_blocking=True)

    steps = {"pixels": vae_step(vae), "cache": from_cache}
    rates: dict[str, list[float]] = {"pixels": [], "cache": []}
    for epoch in range(args.epochs + 1):  # the first pass of each is a warm-up
        for name, (loader, sampler) in runs.items():
            sampler.set_epoch(epoch)
            rate = one_pass(loader, steps[name], device)
            if epoch:
                rates[name].append(rate)
    n = len(pixels)
    jpeg = bytes_under(work / "photos" / "images") / n
    print(f"latents cache: {n} photos x{args.scale:g}, {len(buckets)} buckets, batch "
          f"{args.batch_size}, VAE {args.vae}, device {dev.describe(device)}; encode once "
          f"{encode_s:.1f} s")
    for name, label in (("pixels", "pixels: raw shards, ResizeCrop + VAE each step"),
                        ("cache", "cache: latents store (bf16), RandomLatentFlip")):
        r = rates[name]
        print(f"  {label:<50} median {statistics.median(r):8.1f} samples/s "
              f"({min(r):.1f}-{max(r):.1f})")
    print(f"  bytes per sample: JPEG {jpeg / 1e3:.1f} kB, raw shards "
          f"{bytes_under(shards) / n / 1e3:.1f} kB, latents store {bytes_under(store) / n / 1e3:.1f} kB "
          "(latents + flipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
