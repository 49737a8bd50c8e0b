"""The SDXL-sized VAE row: samples/s of a trainer's inputs made from pixels every step against
read from a latents store, with a VAE of SDXL's config (random weights, nothing downloaded).

    npu-data bench sdxl-vae [--images 4] [--size 1024] [--batch-size 2] [--runs 3]
                            [--device auto] [--threads N]
    npu-data bench sdxl-vae --quick        # 2 photos at 128 px: checks that it runs
    python -m npu_data.bench.sdxl_vae ...  # the same

Mixed-aspect JPEG photos (``aigc_buckets.make_photos``, scaled so SDXL's buckets at
``--size`` fit them) are imported as encoded (JPEG) shards; both pipelines take one
``BucketBatchSampler`` each over SDXL's buckets (at another ``--size``: kohya's rule there):

pixels: DataLoader over the JPEG shards (read + decode) + Compose([ResizeCrop(None),
        RandomHorizontalFlip(), Normalize(0.5, 0.5)]) on ``--device``, then the VAE's
        ``latent_dist.mean * scaling_factor`` there — what a trainer without a store runs
        every step (its text encoders are not run: that favours the pixels)
store:  DataLoader over the latents store (``encode_latents`` of the same shards once,
        bfloat16, no flipped variant) holding SDXL-sized text embeddings (77 x 2048, pooled
        1280: two-layer random text encoders, ``latents.tiny``, so the bytes read are
        SDXL's) + RandomCaption + LatentCaptionDropout(0.1), latents and embeddings moved to
        ``--device``

The VAE is diffusers' ``AutoencoderKL`` with SDXL's VAE config (``latents_cache.build_vae``:
128-512 channels, 2 layers per block, scaling factor 0.13025). The encode once warms the VAE;
the store's pipeline has one warm-up pass; then ``--runs`` passes of each, interleaved. Prints
each pipeline's median samples/s with the runs' range, the encode-once time and the bytes per
sample of the JPEGs and the store.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from npu_data.errors import UserError

SDXL_TEXT = {"tokens": 77, "hidden": (768, 1280), "projection": 1280}


def _need(*names: str) -> None:
    import importlib.util

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        raise UserError(f"bench sdxl-vae: needs {' and '.join(missing)} (the VAE and text "
                        "encoders are built from their configs) — pip install 'npu-data[latents]'")


def _stores(work: Path, images: int, size: int, batch: int, device: torch.device
            ) -> tuple[Path, Path, float, Any]:
    """(JPEG shards, latents store, encode-once seconds (0: reused), the VAE on ``device``)."""
    from npu_data.bench.aigc_buckets import make_photos
    from npu_data.bench.latents_cache import build_vae
    from npu_data.latents import encode_latents
    from npu_data.latents.tiny import save_tiny_encoders
    from npu_data.progress import foreign_bars_off
    from npu_data.shards.importer import import_dataset

    export = make_photos(work / "photos", images, size / 1024)
    shards = work / "shards_jpeg"
    if not (shards / "manifest.json").is_file():
        import_dataset(export, shards, store="encoded")
    vae = build_vae("sdxl").to(device).eval().requires_grad_(False)
    store = work / f"latents_{device.type}"
    seconds = 0.0
    if not (store / "manifest.json").is_file():
        with foreign_bars_off():
            text = save_tiny_encoders(work / "text", **SDXL_TEXT)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        encode_latents(shards, store, vae, buckets=buckets_at(size), batch_size=batch,
                       device=device, flip=False, resume=store.exists(),
                       text_encoders=[text["text_encoder"], text["text_encoder_2"]],
                       tokenizers=[text["tokenizer"], text["tokenizer_2"]])
        seconds = time.perf_counter() - t0
    return shards, store, seconds, vae


def buckets_at(size: int) -> list[tuple[int, int]]:
    """SDXL's buckets at 1024 px; at another ``size`` kohya's rule (64-px steps from 256 px,
    else 8)."""
    from npu_data.buckets import bucket_list

    rule = "sdxl" if size == 1024 else "kohya"
    return [(int(h), int(w)) for h, w in bucket_list(rule, size=size,
                                                     step=64 if size >= 256 else 8)]


def main(argv: list[str] | None = None) -> int:
    from npu_data import device as dev
    from npu_data.bench.latents_cache import bytes_under, one_pass, side_by_side, vae_step
    from npu_data.shards.reader import ShardDataset
    from npu_data.transforms import Compose, LatentCaptionDropout, RandomCaption

    ap = argparse.ArgumentParser(prog="npu-data bench sdxl-vae",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--images", type=int, default=4, help="photos (default %(default)s)")
    ap.add_argument("--size", type=int, default=1024,
                    help="the buckets' size class in px (default %(default)s: SDXL's)")
    ap.add_argument("--batch-size", type=int, default=2, help="default %(default)s")
    ap.add_argument("--runs", type=int, default=3, help="measured passes of each (default 3)")
    ap.add_argument("--device", default="auto", metavar="auto|cpu|cuda|npu")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="2 photos at 128 px, one run")
    ap.add_argument("--work-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "npu-data-bench-sdxl-vae")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.size, args.runs, args.batch_size = 2, 128, 1, 2
    if min(args.images, args.size, args.batch_size, args.runs) < 1 or args.size % 8:
        raise UserError("bench sdxl-vae: --images, --batch-size and --runs must be positive, "
                        "--size a positive multiple of 8")
    _need("diffusers", "transformers")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = dev.resolve_device(args.device)
    work = args.work_dir / f"n{args.images}_s{args.size}_b{args.batch_size}"
    shards, store_dir, encode_s, vae = _stores(work, args.images, args.size, args.batch_size,
                                               device)
    buckets = buckets_at(args.size)
    pixels, store = ShardDataset(shards), ShardDataset(store_dir)
    runs = side_by_side(pixels, store, "store",
                        Compose([RandomCaption(), LatentCaptionDropout(0.1)]), buckets,
                        args.batch_size, device)

    def from_store(batch: dict[str, Any]) -> torch.Tensor:
        for k in ("prompt_embeds", "pooled_prompt_embeds"):
            batch[k].to(device, non_blocking=True)
        return batch["latents"].to(device, torch.float32, non_blocking=True)

    steps = {"pixels": vae_step(vae), "store": from_store}
    rates: dict[str, list[float]] = {"pixels": [], "store": []}
    loader, sampler = runs["store"]  # the pixels' VAE is warm from the encode
    sampler.set_epoch(0)
    one_pass(loader, from_store, device)
    for run in range(1, args.runs + 1):
        for name, (loader, sampler) in runs.items():
            sampler.set_epoch(run)
            rates[name].append(one_pass(loader, steps[name], device))
    n = len(pixels)
    text = store.latents["text"] if store.latents else {}
    print(f"sdxl-vae: {n} photos, buckets at {args.size} px ({len(buckets)}), batch "
          f"{args.batch_size}, {args.runs} interleaved run(s), device {dev.describe(device)}, "
          f"torch threads {torch.get_num_threads()}; encode once "
          + (f"{encode_s:.1f} s" if encode_s else "reused"))
    for name, label in (("pixels", "pixels: JPEG shards, decode + ResizeCrop + VAE"),
                        ("store", f"store: latents + embeddings {text.get('tokens')}x"
                                  f"{text.get('dim')} (bf16)")):
        r = rates[name]  # 3 significant digits: the pixels' rate on a CPU is far below 1
        print(f"  {label:<52} median {statistics.median(r):10.3g} samples/s "
              f"({min(r):.3g}-{max(r):.3g})")
    print(f"  bytes per sample: JPEG {bytes_under(work / 'photos' / 'images') / n / 1e3:.1f} kB, "
          f"store {bytes_under(store_dir) / n / 1e3:.1f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
