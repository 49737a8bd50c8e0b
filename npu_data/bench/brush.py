"""Brush masks for the parse and import benches: brush-heavy exports, as Label Studio writes them.

A mask is a union of a few rotated ellipses and a stroke of discs (what an annotator paints),
encoded with Label Studio's brush RLE (``npu_data.tools.sample_data.mask_to_rle``). Encoding a mask
takes tens of ms in Python, so a bench draws its masks from a small pool of distinct ones: the
importer decodes every mask of the export all the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_data.tools.sample_data import mask_to_rle

POOL = 16
LABELS = ("cat", "dog", "car")


def painted_mask(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """(height, width) bool: 1-3 ellipses and a brush stroke (discs along a random walk)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    m = np.zeros((height, width), bool)
    for _ in range(int(rng.integers(1, 4))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        rx, ry = rng.uniform(0.03, 0.25) * width, rng.uniform(0.03, 0.25) * height
        t = rng.uniform(0, np.pi)
        u = (xx - cx) * np.cos(t) + (yy - cy) * np.sin(t)
        v = -(xx - cx) * np.sin(t) + (yy - cy) * np.cos(t)
        m |= (u / rx) ** 2 + (v / ry) ** 2 <= 1
    r = rng.uniform(0.01, 0.03) * min(width, height) + 1
    x, y = rng.uniform(0, width), rng.uniform(0, height)
    for _ in range(12):
        x, y = x + rng.normal(0, 4 * r), y + rng.normal(0, 4 * r)
        m |= (xx - x) ** 2 + (yy - y) ** 2 <= r * r
    return m


def rle_pool(width: int, height: int, seed: int = 0, n: int = POOL) -> list[list[int]]:
    """``n`` distinct masks of ``width`` x ``height``, as brush RLE byte lists."""
    rng = np.random.default_rng([seed, width, height])
    return [mask_to_rle(painted_mask(rng, width, height)) for _ in range(n)]


def brush_results(pool: list[list[int]], task: int, k: int, width: int, height: int,
                  from_name: str = "brush") -> list[dict[str, Any]]:
    """``k`` brushlabels results of task ``task`` (index from 0), drawn from ``pool``."""
    return [{"id": f"m{task}_{j}", "from_name": from_name, "to_name": "image",
             "type": "brushlabels", "original_width": width, "original_height": height,
             "image_rotation": 0, "origin": "manual",
             "value": {"format": "rle", "rle": pool[(task * 7 + j * 3) % len(pool)],
                       "brushlabels": [LABELS[(task + j) % len(LABELS)]]}}
            for j in range(k)]
