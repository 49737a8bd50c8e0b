"""Per-sample affine maps, made on the host in float64 as torchvision and Pillow make them.

A map is Pillow's 6 coefficients ``(a0, a1, a2, a3, a4, a5)``: output pixel centre
``(x + .5, y + .5)`` to its source point ``(a0 x' + a1 y' + a2, a3 x' + a4 y' + a5)``
(continuous pixels: pixel ``(i, j)`` covers ``[j, j+1) x [i, i+1)``). The geometry follows the
inverse of that map (:func:`forward_matrices`), so boxes and pixels move together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def affine_matrix(center: tuple[float, float], angle: float, translate: Sequence[float],
                  scale: float, shear: Sequence[float]) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` (inverted): Pillow's 6 coefficients."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [x / scale for x in (d, -b, 0.0, -c, a, 0.0)]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m


def rotate_matrix(size: tuple[int, int], angle: float) -> list[float]:
    """Pillow's ``Image.rotate(angle)`` map (counter-clockwise degrees, about the centre,
    ``expand=False``), its coefficients rounded to 15 decimals as Pillow rounds them."""
    h, w = size
    cx, cy = w / 2, h / 2
    rad = -math.radians(angle % 360.0)
    a, b = round(math.cos(rad), 15), round(math.sin(rad), 15)
    c, d = round(-math.sin(rad), 15), round(math.cos(rad), 15)
    m = [a, b, a * (-cx) + b * (-cy), c, d, c * (-cx) + d * (-cy)]
    m[2] += cx
    m[5] += cy
    return m


def affine_matrices(sizes: np.ndarray, angle: np.ndarray, translate: np.ndarray,
                    scale: np.ndarray, shear: np.ndarray) -> np.ndarray:
    """``(B, 6)`` float64: :func:`affine_matrix` of each sample about its valid centre."""
    rows = [affine_matrix((w * 0.5, h * 0.5), a, t, s, sh) for (h, w), a, t, s, sh in zip(
        sizes.tolist(), angle.tolist(), translate.tolist(), scale.tolist(), shear.tolist(),
        strict=True)]
    return np.asarray(rows, dtype=np.float64).reshape(-1, 6)


def rotate_matrices(sizes: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """``(B, 6)`` float64: :func:`rotate_matrix` of each sample."""
    rows = [rotate_matrix((h, w), a) for (h, w), a in zip(sizes.tolist(), angle.tolist(),
                                                            strict=True)]
    return np.asarray(rows, dtype=np.float64).reshape(-1, 6)


def forward_matrices(inverse: np.ndarray) -> np.ndarray:
    """``(B, 2, 3)`` float64: the maps from source to output points (where geometry goes)."""
    m = inverse.reshape(-1, 2, 3)
    lin = np.linalg.inv(m[:, :, :2])
    shift = -np.einsum("bij,bj->bi", lin, m[:, :, 2])
    return np.concatenate([lin, shift[:, :, None]], axis=2)


def translation_matrices(top: np.ndarray, left: np.ndarray) -> np.ndarray:
    """``(B, 6)``: the maps that move each image by ``(top, left)`` pixels (a pad when
    positive, a crop when negative)."""
    t, lft = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (top, left))
    one, zero = np.ones_like(t), np.zeros_like(t)
    return np.stack([one, zero, -lft, zero, one, -t], axis=1)
