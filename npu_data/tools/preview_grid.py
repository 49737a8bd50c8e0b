"""A picture of an augmented batch: each sample drawn with its annotations and caption.

Tools only (copies to the host); the drawing of one sample is ``tools.preview.draw_sample``; each kind unpads its rows (``Kind.unbatch``).
"""

from __future__ import annotations

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
    from npu_data.tools.preview import draw_sample

    tiles = [draw_sample(s, labels, controls) for s in batch_samples(batch, limit)]
    return grid(tiles, cols=cols, title=title)
