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

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data.kinds.registry import KINDS
from npu_data.transforms import geometry as G
from npu_data.transforms._kernels import to_device
from npu_data.transforms._kernels import warp as _warp
from npu_data.transforms._kernels.warp_tables import nearest_tables
from npu_data.transforms.maps import forward_matrices

Batch = dict[str, Any]


@dataclass
class Warp:
    """One batch's warp.

    Attributes:
        inverse: (B, 6) float64 host: the pixels' maps (output to source, Pillow's).
        sizes: (B, 2) input valid sizes.
        out_sizes: (B, 2) int64: each sample's output size.
        out_shape: The output batch (height, width).
        min_visible: The fraction of its area a shape must keep to stay valid.
    """

    inverse: np.ndarray
    sizes: torch.Tensor
    out_sizes: torch.Tensor
    out_shape: tuple[int, int]
    min_visible: float = 0.25

    def __post_init__(self) -> None:
        fwd = forward_matrices(self.inverse)
        self.forward = torch.from_numpy(fwd.astype(np.float32))  # (B, 2, 3)
        self.mirrors = torch.from_numpy(np.linalg.det(fwd[:, :, :2]) < 0)

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
        """Boxes (B, N, 4): the box around the moved corners, clipped; validity updated."""
        x0, y0, x1, y1 = xyxy.unbind(-1)
        corners = torch.stack([torch.stack([x0, y0], -1), torch.stack([x1, y0], -1),
                               torch.stack([x1, y1], -1), torch.stack([x0, y1], -1)], -2)
        moved = self._unit(self.points(corners))
        box, keep = G.clip_xyxy(G.envelope(moved), valid, (1, 1), self.min_visible)
        return self._unit(box.reshape(*box.shape[:-1], 2, 2), True).reshape(box.shape), keep

    def corners(self, corners: torch.Tensor, valid: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated boxes (B, N, 4, 2) moved exactly (corner 0 stays the box's own top-left,
        clockwise: reordered ``[3, 2, 1, 0]`` where the map mirrors); their clipped envelope
        (B, N, 4) and validity."""
        moved = self.points(corners)
        mirrored = torch.stack([moved[..., 3, :], moved[..., 2, :], moved[..., 1, :],
                                moved[..., 0, :]], dim=-2)
        flip = to_device(self.mirrors, corners.device).view(-1, 1, 1, 1)
        moved = torch.where(flip, mirrored, moved)
        unit = self._unit(moved)
        tight = G.clipped_envelope(unit, None, (1, 1))
        keep = G._visible(tight, G.envelope(unit), valid, self.min_visible)
        return moved, self._unit(tight.reshape(*tight.shape[:-1], 2, 2), True).reshape(
            tight.shape), keep

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
        oh, ow = self.out_shape
        tables = tuple(torch.from_numpy(t) for t in nearest_tables(self.inverse, oh, ow))
        fill = torch.zeros(m, dtype=torch.uint8)
        out = _warp.warp(masks, self.sizes, self.out_sizes, tables, False, fill)
        if m == 0:
            return out, valid
        # one output pixel covers |det| source pixels of the inverse map
        inv = self.inverse
        det = np.abs(inv[:, 0] * inv[:, 4] - inv[:, 1] * inv[:, 3])
        area = to_device(torch.from_numpy(det.astype(np.float32)), masks.device).view(b, 1)
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
