"""``npu-data show``: draw one sample with its annotations into a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from npu_data.errors import UserError
from npu_data.shards.reader import ShardDataset
from npu_data.tools.preview import draw_sample

NAME = "show"
HELP = "Draw sample I of a dataset (boxes, polygons, keypoints, ellipses, masks, caption)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data show``."""
    p.add_argument("dataset", metavar="DIR", help="folder written by `npu-data import`")
    p.add_argument("--index", type=int, default=0, metavar="I", help="sample index (default 0)")
    p.add_argument("--out", default="preview.png", metavar="FILE",
                   help="image to write (default preview.png)")


def run(args: argparse.Namespace) -> int:
    """Write the preview and say where."""
    ds = ShardDataset(args.dataset)
    n = len(ds)
    if not 0 <= args.index < n:
        raise UserError(f"{args.dataset}: --index {args.index} out of range — the dataset has "
                        f"{n} samples (0..{n - 1})")
    image = draw_sample(ds[args.index], ds.labels, ds.controls)
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(out)
    except (OSError, ValueError) as exc:
        raise UserError(f"{out}: cannot write the preview ({exc}) — choose another --out "
                        "ending in .png or .jpg") from None
    print(f"wrote {out} (sample {args.index}, task {ds[args.index]['task_id']})")
    return 0
