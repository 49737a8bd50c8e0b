"""``npu-data encode``: run the frozen VAE (and SDXL's text encoders) once over a shard
dataset into a latents store (``npu_data.latents.encode_latents``)."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from npu_data.errors import UserError, UserValueError
from npu_data.shards.storage import ENDPOINT_VARS, endpoint_options

NAME = "encode"
HELP = ("Precompute VAE latents (and SDXL text embeddings) of a shard dataset into a latents "
        "store, bucketed, checksummed and resumable.")
# options whose flag is not --<keyword with dashes> (npu_data.errors spells them)
FLAGS = {"text_encoders": "--text-encoder/--text-encoder-2",
         "tokenizers": "--tokenizer/--tokenizer-2", "flip": "--no-flip"}
PRESETS = ("sdxl", "kohya")
DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data encode``."""
    p.add_argument("dataset", metavar="SHARDS", help="dataset folder written by `npu-data import`")
    p.add_argument("--vae", required=True, metavar="DIR",
                   help="folder of a diffusers AutoencoderKL (save_pretrained; local files only)")
    p.add_argument("--out", required=True, metavar="DIR|URL",
                   help="latents store folder to write, or its URL (s3://bucket/prefix: "
                        "written locally, then uploaded, manifest last)")
    p.add_argument("--text-encoder", metavar="DIR", help="CLIPTextModel folder (SDXL's first)")
    p.add_argument("--text-encoder-2", metavar="DIR",
                   help="CLIPTextModelWithProjection folder (SDXL's second)")
    p.add_argument("--tokenizer", metavar="DIR", help="CLIPTokenizer folder of --text-encoder")
    p.add_argument("--tokenizer-2", metavar="DIR", help="CLIPTokenizer folder of --text-encoder-2")
    p.add_argument("--buckets", default="sdxl", metavar="sdxl|kohya[:SIZE]|HxW,...",
                   help="aspect-ratio buckets: 'sdxl' (SDXL's 1024-px list), 'kohya' or "
                        "'kohya:256' (kohya's rule at SIZE px, default 1024), 'sdxl:512' "
                        "(scaled), or a list such as 1024x1024,832x1216 (sides multiples of "
                        "the VAE's factor, 8) (default: sdxl)")
    p.add_argument("--no-upscale", action="store_true",
                   help="a photo smaller than its bucket gets a bucket inside it (kohya's "
                        "bucket_no_upscale) instead of being resized up")
    p.add_argument("--caption-field", metavar="KEY",
                   help="the task data key holding captions (default: the first TextArea "
                        "text, else the data's caption, text or prompt)")
    p.add_argument("--unconditional", action="store_true",
                   help="encode every sample with the empty prompt (needed to run text "
                        "encoders over a dataset without captions)")
    p.add_argument("--device", default="auto", help="auto (npu, cuda, cpu), cpu, cuda[:N], npu[:N]")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES),
                   help="stored dtype of latents and embeddings (default: bfloat16)")
    p.add_argument("--batch-size", type=int, default=8, metavar="N",
                   help="samples per VAE call, one bucket each (default: 8)")
    p.add_argument("--shard-size", type=int, default=1024, metavar="N",
                   help="source samples per output shard (default: 1024)")
    p.add_argument("--no-flip", dest="flip", action="store_false",
                   help="do not store the mirrored variant (RandomLatentFlip needs it)")
    p.add_argument("--latent", choices=("mean", "sample"), default="mean",
                   help="store the posterior's mean (default) or one draw per sample and "
                        "variant, keyed by --seed")
    p.add_argument("--seed", type=int, default=0, help="the draws' seed with --latent sample")
    p.add_argument("--resume", action="store_true",
                   help="keep the complete shards of an interrupted encode and write the rest")
    p.add_argument("--storage-endpoint", default=None,
                   help=f"S3-compatible endpoint of an --out URL (MinIO, Huawei OBS; default: "
                        f"${ENDPOINT_VARS[0]}, else ${ENDPOINT_VARS[1]})")


def parse_buckets(text: str) -> Any:
    """``"sdxl"``, ``"kohya"``, ``"NAME:SIZE"`` or ``"HxW,HxW,..."`` as ``encode_latents``'
    buckets (a preset at a size: ``npu_data.buckets(NAME, SIZE)``)."""
    from npu_data.buckets import buckets_of

    name, colon, size = text.partition(":")
    if name in PRESETS:
        if not colon:
            return name
        if size.isdigit() and 0 < int(size) <= 1 << 16:
            return buckets_of(name, int(size), who="--buckets")
        raise UserValueError(f"{{buckets}}: {text!r} — the size after {name}: is a side in "
                             f"pixels, e.g. {name}:256", option="buckets")
    try:
        pairs = [tuple(int(v) for v in item.lower().split("x", 1)) for item in text.split(",")]
        if all(len(pr) == 2 for pr in pairs):
            return pairs
    except ValueError:
        pass
    raise UserValueError(f"{{buckets}}: {text!r} is not 'sdxl', 'kohya[:SIZE]' or a list "
                         "such as 1024x1024,832x1216", option="buckets")


def run(args: argparse.Namespace) -> int:
    """Encode, then print what was written."""
    from npu_data.latents import encode_latents, summary

    pairs = [(args.text_encoder, args.tokenizer), (args.text_encoder_2, args.tokenizer_2)]
    given = [(e, t) for e, t in pairs if e or t]
    if any(not e or not t for e, t in given):
        raise UserError("each --text-encoder needs its --tokenizer (and --text-encoder-2 its "
                        "--tokenizer-2) — give both of a pair")
    ds = encode_latents(args.dataset, args.out, args.vae, buckets=parse_buckets(args.buckets),
                        batch_size=args.batch_size, device=args.device,
                        dtype=DTYPES[args.dtype], flip=args.flip,
                        text_encoders=[e for e, _ in given] or None,
                        tokenizers=[t for _, t in given] or None,
                        shard_size=args.shard_size, resume=args.resume,
                        latent=args.latent, seed=args.seed,
                        storage_options=endpoint_options(args.storage_endpoint),
                        caption_field=args.caption_field, unconditional=args.unconditional,
                        no_upscale=args.no_upscale)
    size = sum(m["size"] for s in ds.manifest["shards"] for m in s["files"].values())
    per = size / max(1, len(ds))
    record = ds.latents
    original, target = summary.sizes(ds)
    print(f"{args.out}: {len(ds)} samples, {len(ds.manifest['shards'])} shard(s), "
          f"{size / 1e6:.1f} MB ({per / 1e3:.1f} kB per sample)")
    print(f"buckets: {len(record['buckets'])} listed; stored {summary.bucket_counts(target)}")
    print(summary.upscale_line(original, target, bool(record.get("no_upscale")),
                               "--no-upscale"))
    print(f"captions: {summary.caption_line(record)}")
    from npu_data.shards.latent_read import captions_per_sample

    several = bool(len(ds)) and int(captions_per_sample(ds).max()) > 1
    print(f"captions: {summary.rows_line(ds)}" + (
        "; RandomCaption() picks one per sample each epoch (else the first is trained)"
        if several else ""))
    return 0
