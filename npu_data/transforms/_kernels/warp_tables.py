"""Host tables of the affine warps: Pillow's inverse maps, made in float64 with numpy.

Pillow's ``Image.transform(AFFINE, (a0, a1, a2, a3, a4, a5))`` reads output pixel ``(x, y)``
at ``(a0 (x + .5) + a1 (y + .5) + a2, a3 (x + .5) + a4 (y + .5) + a5)``. Its nearest filter
is integer arithmetic: 16.16 fixed-point coefficients (``affine_fixed``), or, when the map has
no rotation part (``a1 == a3 == 0``), per-column and per-row source indices accumulated in
double (``ImagingScaleAffine``). Its bilinear filter works in double.

Each map becomes four int64 tables per sample, ``col_x (W,)``, ``row_x (H,)``, ``col_y (W,)``,
``row_y (H,)``, whose sums ``col_x[x] + row_x[y]`` (and the same for y) are the source
coordinates in fixed point: ``NEAREST_SHIFT`` fractional bits for nearest (Pillow's own
values, so the kernel is exact), ``BILINEAR_SHIFT`` for bilinear (the double coordinate
rounded to 2**-32 px: the kernel then interpolates in integers). No float reaches the device.
"""

from __future__ import annotations

import numpy as np

NEAREST_SHIFT = 16
BILINEAR_SHIFT = 32

Tables = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _fix16(v: np.ndarray) -> np.ndarray:
    return np.floor(v * 65536.0 + 0.5).astype(np.int64)


def _coord(v: np.ndarray) -> np.ndarray:
    """Pillow's ``COORD``: -1 below 0, else truncation."""
    return np.where(v < 0.0, -1, np.trunc(np.maximum(v, 0.0))).astype(np.int64)


def _accumulated(start: np.ndarray, step: np.ndarray, n: int) -> np.ndarray:
    """``(B, n)``: ``start``, ``start + step``, ... summed one step at a time, in double."""
    seq = np.empty((start.shape[0], n), dtype=np.float64)
    seq[:, 0] = start
    seq[:, 1:] = step[:, None]
    return np.cumsum(seq, axis=1)


def nearest_tables(m: np.ndarray, out_h: int, out_w: int) -> Tables:
    """Pillow's nearest-neighbour source indices, in 16.16 fixed point (see module doc)."""
    b = m.shape[0]
    x = np.arange(out_w, dtype=np.int64)[None, :]
    y = np.arange(out_h, dtype=np.int64)[None, :]
    a0, a1, a2, a3, a4, a5 = (m[:, i] for i in range(6))
    fx = _fix16(m[:, [0, 1, 3, 4]])
    base_x = _fix16(a2 + a0 * 0.5 + a1 * 0.5)
    base_y = _fix16(a5 + a3 * 0.5 + a4 * 0.5)
    col_x = base_x[:, None] + x * fx[:, 0:1]
    row_x = y * fx[:, 1:2]
    col_y = base_y[:, None] + x * fx[:, 2:3]
    row_y = y * fx[:, 3:4]
    scale = (a1 == 0) & (a3 == 0)  # ImagingScaleAffine: indices accumulated in double
    if scale.any():
        xs = _coord(_accumulated(a2 + a0 * 0.5, a0, out_w)) << NEAREST_SHIFT
        ys = _coord(_accumulated(a5 + a4 * 0.5, a4, out_h)) << NEAREST_SHIFT
        s = scale[:, None]
        col_x, row_x = np.where(s, xs, col_x), np.where(s, 0, row_x)
        col_y, row_y = np.where(s, 0, col_y), np.where(s, ys, row_y)
    assert col_x.shape == (b, out_w) and row_y.shape == (b, out_h)
    return col_x, row_x, col_y, row_y


def bilinear_tables(m: np.ndarray, out_h: int, out_w: int) -> Tables:
    """Pillow's double source coordinates, rounded to ``2**-BILINEAR_SHIFT`` px."""
    unit = float(1 << BILINEAR_SHIFT)
    xc = np.arange(out_w, dtype=np.float64)[None, :] + 0.5
    yc = np.arange(out_h, dtype=np.float64)[None, :] + 0.5
    a0, a1, a2, a3, a4, a5 = (m[:, i:i + 1] for i in range(6))

    def fixed(v: np.ndarray) -> np.ndarray:
        # beyond +-2**30 px a point is outside any image: clamp keeps int64 sums exact
        return np.rint(np.clip(v, -2.0**30, 2.0**30) * unit).astype(np.int64)

    return fixed(a0 * xc + a2), fixed(a1 * yc), fixed(a3 * xc + a5), fixed(a4 * yc)
