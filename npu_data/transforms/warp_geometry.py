"""Geometry through an affine warp (affine, rotation, vertical flip, zoom-out, crops).

A :class:`Warp` holds one batch's maps: the forward maps (source point to output point, the
inverse of the pixels' maps, float32) and each sample's output size. Its methods are the
kernels ``Kind.warp`` calls (``kinds.protocols.GeometryWarp``): batched, branch-free,
elementwise (no matmul: exact whatever the matmul precision), no host sync. Axis-aligned
boxes become the box around their moved corners (torchvision's rule); rotated boxes,
polygons, keypoints and ellipses move exactly; masks are warped with the pixels' nearest
map. The visibility rules are the crops' (``geometry``): a shape is clipped to its sample's
output and stays valid while ``min_visible`` of its area remains.
"""

from __future__ import annotations

import numpy as np
import torch

from npu_data.batch import Batch
from npu_data.kinds.registry import KINDS
from npu_data.transforms import geometry as G
from npu_data.transforms._kernels import to_device
from npu_data.transforms._kernels import warp as _warp
from npu_data.transforms._kernels.warp_tables import NEAREST_SHIFT, nearest_tables
from npu_data.transforms.maps import forward_matrices

"""A batch dict: ``image``, ``sizes`` and the kinds' geometry keys (docs/architecture.md)."""


class Warp:
    """One batch's warp: where the geometry goes and how masks are resampled.

    Made by :meth:`from_inverse` (host maps, any warp) or :meth:`from_shift` (integer
    translations on any device: a crop chosen on the device, ``RandomIoUCrop``).

    Args:
        forward: (B, 2, 3) float32: source point to output point per sample.
        tables: The nearest map's fixed-point tables (``_kernels.warp_tables``), int64.
        sizes: (B, 2) input valid sizes.
        out_sizes: (B, 2) int64: each sample's output size.
        out_shape: The output batch (height, width).
        min_visible: The fraction of its area a shape must keep to stay valid.
        mirrors: (B,) bool: the maps that mirror (rotated boxes' corners are reordered).
        area: (B,) float32: source pixels per output pixel.
    """

    def __init__(self, forward: torch.Tensor, tables: tuple[torch.Tensor, ...],
                 sizes: torch.Tensor, out_sizes: torch.Tensor, out_shape: tuple[int, int],
                 min_visible: float, mirrors: torch.Tensor, area: torch.Tensor) -> None:
        self.forward, self.tables, self.sizes, self.out_sizes = forward, tables, sizes, out_sizes
        self.out_shape, self.min_visible = out_shape, min_visible
        self.mirrors, self.area = mirrors, area

    @classmethod
    def from_inverse(cls, inverse: np.ndarray, sizes: torch.Tensor, out_sizes: torch.Tensor,
                     out_shape: tuple[int, int], min_visible: float = 0.25) -> Warp:
        """From the pixels' maps ``inverse (B, 6)`` float64 (host, Pillow's coefficients)."""
        fwd = forward_matrices(inverse)
        det = np.abs(inverse[:, 0] * inverse[:, 4] - inverse[:, 1] * inverse[:, 3])
        tables = tuple(torch.from_numpy(t) for t in nearest_tables(inverse, *out_shape))
        return cls(torch.from_numpy(fwd.astype(np.float32)), tables, sizes, out_sizes,
                   out_shape, min_visible, torch.from_numpy(np.linalg.det(fwd[:, :, :2]) < 0),
                   torch.from_numpy(det.astype(np.float32)))

    @classmethod
    def from_shift(cls, top_left: torch.Tensor, sizes: torch.Tensor, out_sizes: torch.Tensor,
                   out_shape: tuple[int, int], min_visible: float = 0.25) -> Warp:
        """Output pixel ``(y, x)`` from source ``(y + top, x + left)``: ``top_left (B, 2)``
        int64 on any device, nothing read back."""
        tl = top_left.to(torch.int64)
        dev, b = tl.device, tl.shape[0]
        top, left = tl[:, 0:1], tl[:, 1:2]
        one, zero = torch.ones_like(top), torch.zeros_like(top)
        fwd = torch.cat([one, zero, -left, zero, one, -top], 1).to(torch.float32).view(b, 2, 3)
        oh, ow = out_shape
        cols = torch.arange(ow, device=dev).view(1, ow)
        rows = torch.arange(oh, device=dev).view(1, oh)
        unit = 1 << NEAREST_SHIFT
        tables = ((cols + left) * unit, torch.zeros(b, oh, dtype=torch.int64, device=dev),
                  torch.zeros(b, ow, dtype=torch.int64, device=dev), (rows + top) * unit)
        return cls(fwd, tables, sizes, out_sizes, out_shape, min_visible,
                   torch.zeros(b, dtype=torch.bool, device=dev),
                   torch.ones(b, dtype=torch.float32, device=dev))

    # --- helpers --------------------------------------------------------------------------
    def _m(self, like: torch.Tensor, nd: int) -> list[torch.Tensor]:
        m = to_device(self.forward, like.device).to(torch.promote_types(like.dtype,
                                                                         torch.float32))
        return [m[:, i, j].reshape(-1, *([1] * nd)) for i in range(2) for j in range(3)]

    def _wh(self, like: torch.Tensor, nd: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = to_device(self.out_sizes, like.device).to(like.dtype)
        return s[:, 1].reshape(-1, *([1] * nd)), s[:, 0].reshape(-1, *([1] * nd))

    def _unit(self, xy: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """Points (B, ..., 2) in units of each sample's output size (or back): the crops'
        clipping rules take one output size, ``(1, 1)`` here."""
        w, h = self._wh(xy, xy.ndim - 2)
        if inverse:
            return torch.stack([xy[..., 0] * w, xy[..., 1] * h], dim=-1)
        return torch.stack([xy[..., 0] / w.clamp(min=1), xy[..., 1] / h.clamp(min=1)], dim=-1)

    # --- the kernels ----------------------------------------------------------------------
    def points(self, xy: torch.Tensor) -> torch.Tensor:
        """Points (B, ..., 2) x, y moved (no clipping), shaped and typed as ``xy``."""
        m00, m01, m02, m10, m11, m12 = self._m(xy, xy.ndim - 2)
        x, y = xy[..., 0].to(m00.dtype), xy[..., 1].to(m00.dtype)
        return torch.stack([m00 * x + m01 * y + m02, m10 * x + m11 * y + m12], -1).to(xy.dtype)

    def xyxy(self, xyxy: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Boxes (B, N, 4): the box around the moved corners, clipped to the output; valid
        while ``min_visible`` of its area remains (a degenerate box: while inside)."""
        x0, y0, x1, y1 = xyxy.unbind(-1)
        corners = torch.stack([torch.stack([x0, y0], -1), torch.stack([x1, y0], -1),
                               torch.stack([x1, y1], -1), torch.stack([x0, y1], -1)], -2)
        env = G.envelope(self.points(corners))
        w, h = self._wh(env, 1)
        hi = torch.stack([w, h, w, h], -1)
        clipped = torch.minimum(env.clamp(min=0), hi)
        before, after = G._area(env), G._area(clipped)
        inside = ((clipped == env).sum(-1) == 4).to(after.dtype)
        frac = torch.where(before > 0, after / before.clamp(min=1e-12), inside)
        keep = valid & (frac >= self.min_visible) & ((after > 0) | (before <= 0))
        return clipped, keep

    def corners(self, corners: torch.Tensor, valid: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated boxes (B, N, 4, 2) moved exactly (corner 0 stays the box's own top-left,
        clockwise: reordered ``[3, 2, 1, 0]`` where the map mirrors; upright ones clipped to
        the output as their envelope is, ``G.clip_upright_corners``); their clipped envelope
        (B, N, 4) and validity."""
        moved = self.points(corners)
        mirrored = torch.stack([moved[..., 3, :], moved[..., 2, :], moved[..., 1, :],
                                moved[..., 0, :]], dim=-2)
        flip = to_device(self.mirrors, corners.device).view(-1, 1, 1, 1)
        moved = torch.where(flip, mirrored, moved)
        unit = self._unit(moved)
        tight = G.clipped_envelope(unit, None, (1, 1))
        keep = G._visible(tight, G.envelope(unit), valid, self.min_visible)
        w, h = self._wh(moved, moved.ndim - 3)
        return G.clip_upright_corners(moved, w.unsqueeze(-1), h.unsqueeze(-1)), self._unit(
            tight.reshape(*tight.shape[:-1], 2, 2), True).reshape(tight.shape), keep

    def polygons(self, points: torch.Tensor, vertex_valid: torch.Tensor, valid: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Polygons (B, N, V, 2) moved exactly, then clamped to the output; validity by the
        envelope of their part inside the output, as the crops do."""
        moved = self.points(points)
        unit = self._unit(moved)
        tight = G.clipped_envelope(unit, vertex_valid, (1, 1))
        keep = G._visible(tight, G.envelope(unit, vertex_valid), valid, self.min_visible)
        w, h = self._wh(moved, moved.ndim - 2)
        clamped = torch.stack([torch.minimum(moved[..., 0].clamp(min=0), w),
                               torch.minimum(moved[..., 1].clamp(min=0), h)], -1)
        return clamped.to(points.dtype), keep

    def keypoints(self, xy: torch.Tensor, valid: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keypoints (B, K, 2) moved; those outside the output become invalid."""
        moved = self.points(xy)
        return moved, valid & self._inside(moved)

    def _inside(self, xy: torch.Tensor) -> torch.Tensor:
        w, h = self._wh(xy, xy.ndim - 2)
        x, y = xy[..., 0], xy[..., 1]
        return (x >= 0) & (x <= w) & (y >= 0) & (y <= h)

    def ellipses(self, params: torch.Tensor, valid: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ellipses (B, E, 5) cx, cy, rx, ry, rotation (degrees) through the map exactly: the
        shape matrix ``A R diag(rx², ry²) Rᵀ Aᵀ`` re-diagonalised (``A`` the linear part)."""
        work = torch.promote_types(params.dtype, torch.float32)
        p = params.to(work)
        centre = self.points(p[..., :2])
        m00, m01, _, m10, m11, _ = self._m(p, 1)
        th = torch.deg2rad(p[..., 4])
        c, s = torch.cos(th), torch.sin(th)
        rx2, ry2 = p[..., 2] ** 2, p[..., 3] ** 2
        sxx, sxy, syy = c * c * rx2 + s * s * ry2, c * s * (rx2 - ry2), s * s * rx2 + c * c * ry2
        a = m00 * m00 * sxx + 2 * m00 * m01 * sxy + m01 * m01 * syy
        b = m00 * m10 * sxx + (m00 * m11 + m01 * m10) * sxy + m01 * m11 * syy
        d = m10 * m10 * sxx + 2 * m10 * m11 * sxy + m11 * m11 * syy
        angle = 0.5 * torch.atan2(2 * b, a - d)
        half, root = (a + d) / 2, torch.sqrt(((a - d) / 2) ** 2 + b * b)
        rx, ry = torch.sqrt((half + root).clamp(min=0)), torch.sqrt((half - root).clamp(min=0))
        out = torch.stack([centre[..., 0], centre[..., 1], rx, ry, torch.rad2deg(angle)], -1)
        return out.to(params.dtype), valid & self._inside(out[..., :2])

    def masks(self, masks: torch.Tensor, valid: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masks (B, M, H, W) uint8 warped with the pixels' nearest map (0 outside); valid
        while the area they keep, in source pixels, is ``min_visible`` of theirs."""
        b, m = masks.shape[:2]
        fill = torch.zeros(m, dtype=torch.uint8)
        out = _warp.warp(masks, self.sizes, self.out_sizes, self.tables, False, fill)
        if m == 0:
            return out, valid
        area = to_device(self.area, masks.device).view(b, 1)  # source pixels per output one
        before = masks.sum(dim=(-2, -1), dtype=torch.float32)
        after = out.sum(dim=(-2, -1), dtype=torch.float32) * area
        frac = torch.where(before > 0, after / before.clamp(min=1), 1.0)
        return out, valid & (frac >= self.min_visible)


def warp_geometry(batch: Batch, warp: Warp) -> Batch:
    """The geometry keys of ``batch`` through ``warp`` (``Kind.warp`` of each kind).

    Args:
        batch: A batch dict.
        warp: The batch's maps and output sizes.

    Returns:
        The moved geometry keys (the image is not among them).
    """
    out: Batch = {}
    for kind in KINDS:
        out.update(kind.warp(batch, warp, G))
    return out
