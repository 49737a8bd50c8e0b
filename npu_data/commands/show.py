"""``npu-data show``: draw one sample with its annotations into a PNG (of a latents store:
its latents decoded with ``--vae``, else its latent channels)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npu_data.errors import UserError
from npu_data.shards.reader import ShardDataset

NAME = "show"
HELP = ("Draw sample I of a dataset (boxes, polygons, keypoints, ellipses, masks, caption); "
        "of a latents store, its latents decoded with --vae, else its channels.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data show``."""
    p.add_argument("dataset", metavar="DIR",
                   help="folder written by `npu-data import` or `npu-data encode`")
    p.add_argument("--index", type=int, default=0, metavar="I", help="sample index (default 0)")
    p.add_argument("--out", default="preview.png", metavar="FILE",
                   help="image to write (default preview.png)")
    p.add_argument("--vae", metavar="DIR",
                   help="of a latents store: the AutoencoderKL folder it was encoded with, to "
                        "decode the latents (default: the latent channels, side by side)")


def _latent_picture(ds: ShardDataset, sample: dict[str, Any], vae: str | None) -> Any:
    from npu_data.previews.latent_picture import latent_picture

    if vae is None:
        return latent_picture(sample), "latent channels side by side"
    import torch

    from npu_data.latents import check_store
    from npu_data.latents.models import config_sha256, load_models
    from npu_data.progress import foreign_bars_off

    with foreign_bars_off():
        model = load_models(vae, None, None, torch.device("cpu")).vae
    check_store(ds, vae_config=config_sha256(model))
    return latent_picture(sample, model), "decoded with the VAE"


def run(args: argparse.Namespace) -> int:
    """Write the preview and say where."""
    ds = ShardDataset(args.dataset)
    n = len(ds)
    if not 0 <= args.index < n:
        raise UserError(f"{args.dataset}: --index {args.index} out of range — the dataset has "
                        f"{n} samples (0..{n - 1})")
    sample = ds[args.index]
    if ds.latents is not None:
        image, how = _latent_picture(ds, sample, args.vae)
    elif args.vae is not None:
        raise UserError(f"{args.dataset}: an image dataset, not a latents store — drop --vae")
    else:
        from npu_data.previews.canvas import draw_sample

        image, how = draw_sample(sample, ds.labels, ds.controls), ""
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(out)
    except (OSError, ValueError) as exc:
        raise UserError(f"{out}: cannot write the preview ({exc}) — choose another --out "
                        "ending in .png or .jpg") from None
    print(f"wrote {out} (sample {args.index}, task {sample['task_id']}"
          f"{'; ' + how if how else ''})")
    return 0
