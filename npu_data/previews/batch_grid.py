"""A picture of an augmented batch: each sample drawn with its annotations and caption, and
one of the geometric transforms applied to it, a row per transform.

Previews only (copies to the host); the drawing of one sample is ``previews.canvas.draw_sample``;
each kind unpads its rows (``Kind.unbatch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from npu_data.kinds.registry import PADDED


def _np(v: Any) -> np.ndarray:
    return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)


def batch_samples(batch: dict[str, Any], limit: int | None = None) -> list[dict[str, Any]]:
    """Sample dicts (docs/architecture.md keys) of the first ``limit`` samples of a batch."""
    images, sizes = _np(batch["image"]), _np(batch["sizes"])
    n = len(images) if limit is None else min(limit, len(images))
    captions = batch.get("caption") or [""] * len(images)
    host = {k: _np(v) for k, v in batch.items() if isinstance(v, (torch.Tensor, np.ndarray))}
    out = []
    for i in range(n):
        h, w = (int(v) for v in sizes[i])
        s: dict[str, Any] = {"image": np.ascontiguousarray(images[i, :, :h, :w].transpose(1, 2, 0)),
                             "caption": str(captions[i])}
        for kind in PADDED:
            s.update(kind.unbatch(host, i, (h, w)))
        out.append(s)
    return out


def grid(tiles: list[Image.Image], cols: int = 4, title: str = "", pad: int = 8) -> Image.Image:
    """Tiles side by side, ``cols`` per row, with an optional title line above."""
    if not tiles:
        return Image.new("RGB", (320, 60), "white")
    tw, th = max(t.width for t in tiles), max(t.height for t in tiles)
    cols = max(1, min(cols, len(tiles)))
    rows = (len(tiles) + cols - 1) // cols
    head = 28 if title else 0
    out = Image.new("RGB", (cols * (tw + pad) + pad, rows * (th + pad) + pad + head), "white")
    if title:
        ImageDraw.Draw(out).text((pad, 8), title, fill="black", font=ImageFont.load_default())
    for k, t in enumerate(tiles):
        out.paste(t.convert("RGB"), (pad + (k % cols) * (tw + pad),
                                     head + pad + (k // cols) * (th + pad)))
    return out


def preview_batch(batch: dict[str, Any], labels: dict[str, list[str]], controls: list[str],
                  limit: int = 8, cols: int = 4, title: str = "") -> Image.Image:
    """The grid picture of the first ``limit`` samples of an augmented batch."""
    from npu_data.previews.canvas import draw_sample

    tiles = [draw_sample(s, labels, controls) for s in batch_samples(batch, limit)]
    return grid(tiles, cols=cols, title=title)


def geometric_ops() -> list[tuple[str, Callable[[], Any]]]:
    """The geometric transforms the geometry preview shows, as (row label, factory)."""
    from npu_data.transforms import (
        RandomAffine,
        RandomIoUCrop,
        RandomRotation,
        RandomVerticalFlip,
        RandomZoomOut,
        ScaleJitter,
    )

    return [
        ("RandomAffine(25, translate 0.1, scale 0.8-1.1, shear 10)",
         lambda: RandomAffine(25, translate=(0.1, 0.1), scale=(0.8, 1.1), shear=10)),
        ("RandomRotation(30)", lambda: RandomRotation(30)),
        ("RandomVerticalFlip(p=1)", lambda: RandomVerticalFlip(1.0)),
        ("RandomZoomOut(side_range=(1, 2))",
         lambda: RandomZoomOut(p=1.0, side_range=(1.0, 2.0))),
        ("RandomIoUCrop()", lambda: RandomIoUCrop()),
        ("ScaleJitter(224)", lambda: ScaleJitter(224)),
    ]


def head(batch: dict[str, Any], n: int) -> dict[str, Any]:
    """The first ``n`` samples of a batch (tensors and lists sliced; the rest kept)."""
    return {k: v[:n] if isinstance(v, (torch.Tensor, list)) else v for k, v in batch.items()}


def preview_geometry(batch: dict[str, Any], labels: dict[str, list[str]],
                     controls: list[str], limit: int = 4, seed: int = 0) -> Image.Image:
    """A row per geometric transform (:func:`geometric_ops`): the first ``limit`` samples of
    ``batch`` after it, their boxes, polygons, keypoints, ellipses and masks drawn where the
    transform moved them, the transform named under each tile."""
    from npu_data.device import manual_seed
    from npu_data.previews.canvas import draw_sample

    small = head(batch, limit)
    device = small["image"].device
    tiles = []
    for k, (label, make) in enumerate(geometric_ops()):
        out = make()(small, manual_seed(seed + k, device))
        for s in batch_samples(out):
            s["caption"] = label
            tiles.append(draw_sample(s, labels, controls, min_side=224))
    return grid(tiles, cols=min(limit, len(small["image"])),
                title="geometry follows the pixels: each row one transform")
