"""Batches with every geometry group and the maths that checks where the geometry went."""

from __future__ import annotations

import numpy as np
import torch


def geometry_batch(b: int = 8, h: int = 48, w: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded channels-last batch of mixed sizes (sample 0 fills it) with every geometry
    group (boxes, polygons, keypoints, ellipses, masks) inside the images."""
    rng = np.random.default_rng(seed)
    sizes = np.stack([rng.integers(20, h + 1, b), rng.integers(20, w + 1, b)], 1)
    sizes[0] = (h, w)
    img = np.zeros((b, h, w, 3), np.uint8)
    for i, (hh, ww) in enumerate(sizes):
        img[i, :hh, :ww] = rng.integers(0, 256, (hh, ww, 3), dtype=np.uint8)
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.rand(*shape, generator=g) * scale

    xy = rand(b, 3, 2, scale=14) + 2
    return {
        "image": torch.from_numpy(img).permute(0, 3, 1, 2),
        "sizes": torch.from_numpy(sizes.astype(np.int64)),
        "index": torch.arange(b),
        "boxes.xyxy": torch.cat([xy, xy + rand(b, 3, 2, scale=5) + 1], -1),
        "boxes.valid": torch.ones(b, 3, dtype=torch.bool),
        "polygons.points": rand(b, 2, 5, 2, scale=18),
        "polygons.vertex_valid": torch.ones(b, 2, 5, dtype=torch.bool),
        "polygons.valid": torch.ones(b, 2, dtype=torch.bool),
        "keypoints.xy": rand(b, 4, 2, scale=18) + 1,
        "keypoints.valid": torch.ones(b, 4, dtype=torch.bool),
        "ellipses.params": torch.cat([rand(b, 2, 2, scale=10) + 5, 1 + rand(b, 2, 2, scale=4),
                                      rand(b, 2, 1, scale=180)], -1),
        "ellipses.valid": torch.ones(b, 2, dtype=torch.bool),
        "masks.mask": (rand(b, 2, h, w) > 0.5).to(torch.uint8),
        "masks.valid": torch.ones(b, 2, dtype=torch.bool),
    }


def apply_affine(m: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Points ``xy`` (..., 2) moved by the 2x3 matrix ``m``."""
    return xy @ m[:, :2].T + m[:, 2]


def ellipse_outline(p: np.ndarray, n: int = 16) -> np.ndarray:
    """``n`` points on the outline of ellipse ``p`` (cx, cy, rx, ry, degrees)."""
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    th = np.deg2rad(p[4])
    x, y = p[2] * np.cos(t), p[3] * np.sin(t)
    return np.stack([p[0] + x * np.cos(th) - y * np.sin(th),
                     p[1] + x * np.sin(th) + y * np.cos(th)], -1)


def check_ellipses(before: np.ndarray, after: np.ndarray, m: np.ndarray) -> None:
    """Each ellipse of ``after`` passes through ``before``'s outline moved by ``m``."""
    for p, q in zip(before, after, strict=True):
        pts = apply_affine(m, ellipse_outline(p))
        np.testing.assert_allclose(q[:2], apply_affine(m, p[None, :2])[0], atol=2e-3)
        th = np.deg2rad(q[4])
        d = pts - q[:2]
        u = d[:, 0] * np.cos(th) + d[:, 1] * np.sin(th)
        v = -d[:, 0] * np.sin(th) + d[:, 1] * np.cos(th)
        np.testing.assert_allclose((u / q[2]) ** 2 + (v / q[3]) ** 2, 1.0, atol=2e-3)
