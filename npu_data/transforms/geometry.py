"""Geometry that follows the image: boxes, rotated boxes, polygons, keypoints, masks.

Batched and branch-free (no host syncs); the per-sample parameters (crop boxes, flips) may
be host tensors, copied to the geometry's device without waiting. Coordinates are continuous pixels (pixel ``(i, j)``
covers ``[j, j+1) x [i, i+1)``). A resized crop with crop box ``(top, left, height, width)``
and output ``(out_h, out_w)`` maps ``x' = (x - left) * out_w / width`` and
``y' = (y - top) * out_h / height``; a horizontal flip maps ``x' = w - x`` within each
sample's valid width ``w``. Geometry cut by a crop is clipped to the output and marked invalid
(``<group>.valid = False``) when less than ``min_visible`` of it remains.
"""

from __future__ import annotations

import math

import torch

from npu_data.batch import Batch
from npu_data.kinds.registry import KINDS
from npu_data.transforms._kernels import to_device

"""A batch dict: ``image``, ``sizes`` and the kinds' geometry keys (docs/architecture.md)."""


def _affine(crop_boxes: torch.Tensor, out_size: tuple[int, int], device: torch.device
            ) -> tuple[torch.Tensor, ...]:
    """Per-sample ``(top, left, scale_y, scale_x)``, each ``(B,)`` float32 on ``device``."""
    boxes = to_device(crop_boxes, device).to(torch.float32)
    top, left, height, width = boxes.unbind(-1)
    return top, left, out_size[0] / height, out_size[1] / width


def _bshape(v: torch.Tensor, ndim: int) -> torch.Tensor:
    return v.reshape(v.shape[0], *([1] * (ndim - 1)))


def resized_crop_points(
    xy: torch.Tensor, crop_boxes: torch.Tensor, out_size: tuple[int, int]
) -> torch.Tensor:
    """Map points into the resized crop (no clipping).

    Args:
        xy: Points (B, ..., 2) (x, y).
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).

    Returns:
        The mapped points, shaped and typed as ``xy``.
    """
    top, left, sy, sx = _affine(crop_boxes, out_size, xy.device)
    nd = xy.ndim - 1
    x = (xy[..., 0] - _bshape(left, nd)) * _bshape(sx, nd)
    y = (xy[..., 1] - _bshape(top, nd)) * _bshape(sy, nd)
    return torch.stack([x, y], dim=-1).to(xy.dtype)


def _area(xyxy: torch.Tensor) -> torch.Tensor:
    return (xyxy[..., 2] - xyxy[..., 0]).clamp(min=0) * (xyxy[..., 3] - xyxy[..., 1]).clamp(min=0)


def clip_xyxy(
    xyxy: torch.Tensor, valid: torch.Tensor, out_size: tuple[int, int], min_visible: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip boxes to ``[0, out_w] x [0, out_h]``; drop those mostly outside.

    A box stays valid when ``area after clipping / area before >= min_visible`` (a degenerate
    box stays valid when it lies inside the output).

    Args:
        xyxy: Boxes (B, N, 4) x0, y0, x1, y1.
        valid: (B, N) bool: the boxes' validity so far.
        out_size: The output (out_h, out_w).
        min_visible: The fraction of its area a shape must keep to stay valid.

    Returns:
        (clipped boxes, valid): the boxes clipped to the output and their updated validity.
    """
    oh, ow = out_size
    lo = xyxy.new_zeros(4)
    hi = to_device(torch.tensor([ow, oh, ow, oh], dtype=xyxy.dtype), xyxy.device)
    clipped = torch.minimum(torch.maximum(xyxy, lo), hi)
    before = _area(xyxy)
    after = _area(clipped)
    inside = (clipped == xyxy).all(-1)
    frac = torch.where(before > 0, after / before.clamp(min=1e-12), inside.to(after.dtype))
    keep = valid & (frac >= min_visible) & ((after > 0) | (before <= 0))
    return clipped, keep


def envelope(points: torch.Tensor, vertex_valid: torch.Tensor | None = None) -> torch.Tensor:
    """Axis-aligned envelope of points.

    Args:
        points: (..., V, 2) x, y.
        vertex_valid: Optional (..., V) bool: the vertices that count (none: all zeros out).

    Returns:
        (..., 4) x0, y0, x1, y1.
    """
    if vertex_valid is None:
        lo = points.amin(-2)
        hi = points.amax(-2)
    else:
        m = vertex_valid.unsqueeze(-1)
        lo = torch.where(m, points, math.inf).amin(-2)
        hi = torch.where(m, points, -math.inf).amax(-2)
        none = ~vertex_valid.any(-1, keepdim=True)
        lo = torch.where(none, 0.0, lo)
        hi = torch.where(none, 0.0, hi)
    return torch.cat([lo, hi], dim=-1)


def clipped_envelope(
    points: torch.Tensor, vertex_valid: torch.Tensor | None, out_size: tuple[int, int]
) -> torch.Tensor:
    """Envelope of a polygon intersected with the output ``[0, out_w] x [0, out_h]``.

    The intersection's extreme points are among: the vertices inside the output, the
    crossings of the polygon's edges with the output's border, and the output's corners
    inside the polygon (even-odd rule) — all found branch-free.

    Args:
        points: Polygon vertices (..., V, 2), padding vertices at the end.
        vertex_valid: Optional (..., V) bool: the real vertices (None: all).
        out_size: The output (out_h, out_w).

    Returns:
        (..., 4) x0, y0, x1, y1; zeros where the polygon and the output do not meet.
    """
    oh, ow = float(out_size[0]), float(out_size[1])
    v = points.shape[-2]
    vv = (
        torch.ones(points.shape[:-1], dtype=torch.bool, device=points.device)
        if vertex_valid is None
        else vertex_valid
    )
    p = points.to(torch.float32)
    x, y = p[..., 0], p[..., 1]
    # next valid vertex of each vertex (padding vertices are at the end): closes the ring
    idx = torch.arange(v, device=p.device)
    count = vv.sum(-1, keepdim=True)
    nxt = torch.where(idx + 1 < count, idx + 1, 0).expand(vv.shape)
    x2, y2 = x.gather(-1, nxt), y.gather(-1, nxt)
    eps = 1e-4
    cand_x = [x]
    cand_y = [y]
    cand_ok = [vv & (x >= -eps) & (x <= ow + eps) & (y >= -eps) & (y <= oh + eps)]
    for axis, level in ((0, 0.0), (0, ow), (1, 0.0), (1, oh)):
        a, a2, o, o2 = (x, x2, y, y2) if axis == 0 else (y, y2, x, x2)
        den = a2 - a
        t = (level - a) / torch.where(den == 0, 1.0, den)
        cross_o = o + t * (o2 - o)
        hi = oh if axis == 0 else ow
        ok = vv & (den != 0) & (t >= 0) & (t <= 1) & (cross_o >= -eps) & (cross_o <= hi + eps)
        lv = torch.full_like(cross_o, level)
        cand_x.append(lv if axis == 0 else cross_o)
        cand_y.append(cross_o if axis == 0 else lv)
        cand_ok.append(ok)
    for cx, cy in ((0.0, 0.0), (ow, 0.0), (ow, oh), (0.0, oh)):
        straddle = (y > cy) != (y2 > cy)
        xi = x + (cy - y) * (x2 - x) / torch.where(y2 == y, 1.0, y2 - y)
        crossings = (vv & straddle & (cx < xi)).sum(-1, keepdim=True)
        inside = (crossings % 2 == 1).expand(vv.shape) & (idx == 0)
        cand_x.append(torch.full_like(x, cx))
        cand_y.append(torch.full_like(y, cy))
        cand_ok.append(inside)
    cxs, cys, oks = torch.cat(cand_x, -1), torch.cat(cand_y, -1), torch.cat(cand_ok, -1)
    any_ok = oks.any(-1, keepdim=True)
    x0 = torch.where(oks, cxs, math.inf).amin(-1, keepdim=True).clamp(0, ow)
    x1 = torch.where(oks, cxs, -math.inf).amax(-1, keepdim=True).clamp(0, ow)
    y0 = torch.where(oks, cys, math.inf).amin(-1, keepdim=True).clamp(0, oh)
    y1 = torch.where(oks, cys, -math.inf).amax(-1, keepdim=True).clamp(0, oh)
    env = torch.cat([x0, y0, x1, y1], dim=-1)
    return torch.where(any_ok, env, torch.zeros_like(env)).to(points.dtype)


def _visible(
    tight: torch.Tensor, full: torch.Tensor, valid: torch.Tensor, min_visible: float
) -> torch.Tensor:
    before = _area(full)
    after = _area(tight)
    frac = torch.where(before > 0, after / before.clamp(min=1e-12), (tight != 0).any(-1).float())
    return valid & (frac >= min_visible) & ((after > 0) | (before <= 0))


def resized_crop_xyxy(
    xyxy: torch.Tensor,
    valid: torch.Tensor,
    crop_boxes: torch.Tensor,
    out_size: tuple[int, int],
    min_visible: float = 0.25,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boxes through a resized crop: mapped, clipped, validity updated.

    Args:
        xyxy: Boxes (B, N, 4) x0, y0, x1, y1.
        valid: (B, N) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).
        min_visible: The fraction of its area a shape must keep to stay valid.

    Returns:
        (boxes, valid): the boxes in the output, clipped, and their updated validity.
    """
    pts = resized_crop_points(xyxy.reshape(*xyxy.shape[:-1], 2, 2), crop_boxes, out_size)
    return clip_xyxy(pts.reshape(xyxy.shape), valid, out_size, min_visible)


def clip_upright_corners(corners: torch.Tensor, width: torch.Tensor | float,
                         height: torch.Tensor | float) -> torch.Tensor:
    """Upright boxes' corners clipped to the output, as their ``xyxy`` is: each corner
    clamped, which for a box whose edges run along the axes is the clipped box, corners in
    their order. Rotated boxes keep their corners (a clipped rotated box is no longer a box).

    Args:
        corners: Boxes (B, N, 4, 2), corner 0 the box's own top-left, clockwise.
        width: The output width (a float, or a tensor broadcasting to (B, N, 4)).
        height: The output height (the same).

    Returns:
        The corners, upright boxes' clipped, shaped and typed as ``corners``.
    """
    d = corners - corners.roll(1, dims=-2)  # each edge
    upright = ((d[..., 0] == 0) | (d[..., 1] == 0)).all(-1, keepdim=True)  # (B, N, 1)
    x, y = corners[..., 0].clamp(min=0), corners[..., 1].clamp(min=0)
    x = torch.minimum(x, width) if isinstance(width, torch.Tensor) else x.clamp(max=width)
    y = torch.minimum(y, height) if isinstance(height, torch.Tensor) else y.clamp(max=height)
    clipped = torch.stack([x, y], -1)
    return torch.where(upright.unsqueeze(-1), clipped, corners)


def resized_crop_corners(
    corners: torch.Tensor,
    valid: torch.Tensor,
    crop_boxes: torch.Tensor,
    out_size: tuple[int, int],
    min_visible: float = 0.25,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotated boxes through a resized crop.

    Upright boxes' corners are clipped as their ``xyxy`` is (:func:`clip_upright_corners`);
    rotated ones are mapped but not clipped (a clipped rotated box is no longer a box).
    ``xyxy`` is the envelope of the part of the box inside the output, and its area over the
    whole envelope's is the visible fraction.

    Args:
        corners: Rotated boxes (B, N, 4, 2), corner 0 the box's own top-left, clockwise.
        valid: (B, N) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).
        min_visible: The fraction of its area a shape must keep to stay valid.

    Returns:
        (corners, xyxy, valid): the mapped corners (upright ones clipped), their clipped
        envelope (B, N, 4) and the updated validity.
    """
    mapped = resized_crop_points(corners, crop_boxes, out_size)
    xyxy = clipped_envelope(mapped, None, out_size)
    keep = _visible(xyxy, envelope(mapped), valid, min_visible)
    return clip_upright_corners(mapped, float(out_size[1]), float(out_size[0])), xyxy, keep


def resized_crop_polygons(
    points: torch.Tensor,
    vertex_valid: torch.Tensor,
    valid: torch.Tensor,
    crop_boxes: torch.Tensor,
    out_size: tuple[int, int],
    min_visible: float = 0.25,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Polygons through a resized crop: points mapped and clamped to the output.

    A polygon stays valid when the envelope of its part inside the output keeps
    ``min_visible`` of the area of its whole envelope.

    Args:
        points: Polygons (B, N, V, 2), padding vertices at the end.
        vertex_valid: (B, N, V) bool: the real vertices.
        valid: (B, N) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).
        min_visible: The fraction of its area a shape must keep to stay valid.

    Returns:
        (points, valid): the clamped points and the updated validity.
    """
    mapped = resized_crop_points(points, crop_boxes, out_size)
    tight = clipped_envelope(mapped, vertex_valid, out_size)
    keep = _visible(tight, envelope(mapped, vertex_valid), valid, min_visible)
    oh, ow = out_size
    clamped = torch.stack(
        [mapped[..., 0].clamp(0, ow), mapped[..., 1].clamp(0, oh)], dim=-1
    ).to(points.dtype)
    return clamped, keep


def resized_crop_keypoints(
    xy: torch.Tensor, valid: torch.Tensor, crop_boxes: torch.Tensor, out_size: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keypoints through a resized crop: mapped; those outside the output become invalid.

    Args:
        xy: Keypoints (B, K, 2) x, y.
        valid: (B, K) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).

    Returns:
        (keypoints, valid): the mapped keypoints and the updated validity (invalid outside
        ``[0, out_w] x [0, out_h]``).
    """
    mapped = resized_crop_points(xy, crop_boxes, out_size)
    oh, ow = out_size
    x, y = mapped[..., 0], mapped[..., 1]
    inside = (x >= 0) & (x <= ow) & (y >= 0) & (y <= oh)
    return mapped, valid & inside


def resized_crop_ellipses(
    params: torch.Tensor, valid: torch.Tensor, crop_boxes: torch.Tensor, out_size: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ellipses through a resized crop, exact under the per-axis scale.

    The shape matrix ``S R diag(rx², ry²) Rᵀ S`` is re-diagonalised, so a rotated ellipse
    stretched unevenly gets its new axes and angle.

    Args:
        params: Ellipses (B, E, 5) cx, cy, rx, ry, rotation (degrees, clockwise with y down).
        valid: (B, E) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).

    Returns:
        (ellipses, valid): the mapped ellipses and the updated validity (invalid where the
        centre leaves ``[0, out_w] x [0, out_h]``).
    """
    _, _, sy, sx = _affine(crop_boxes, out_size, params.device)
    # float32 for the loaders' float32 columns (no float64 on a device); float64 stays float64
    work = torch.promote_types(params.dtype, torch.float32)
    p = params.to(work)
    centre = resized_crop_points(p[..., :2], crop_boxes, out_size)
    th = torch.deg2rad(p[..., 4])
    c, s = torch.cos(th), torch.sin(th)
    rx2, ry2 = p[..., 2] ** 2, p[..., 3] ** 2
    fx, fy = _bshape(sx.to(work), 2), _bshape(sy.to(work), 2)
    a = (c * c * rx2 + s * s * ry2) * fx * fx
    b = (c * s * (rx2 - ry2)) * fx * fy
    d = (s * s * rx2 + c * c * ry2) * fy * fy
    angle = 0.5 * torch.atan2(2 * b, a - d)
    half, root = (a + d) / 2, torch.sqrt(((a - d) / 2) ** 2 + b * b)
    rx, ry = torch.sqrt((half + root).clamp(min=0)), torch.sqrt((half - root).clamp(min=0))
    out = torch.stack([centre[..., 0], centre[..., 1], rx, ry, torch.rad2deg(angle)], dim=-1)
    oh, ow = out_size
    x, y = out[..., 0], out[..., 1]
    inside = (x >= 0) & (x <= ow) & (y >= 0) & (y <= oh)
    return out.to(params.dtype), valid & inside


def hflip_ellipses(params: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Ellipses mirrored: ``cx' = w - cx``, rotation negated.

    Args:
        params: Ellipses (B, E, 5) cx, cy, rx, ry, rotation (degrees).
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The ellipses, mirrored where ``flip`` is set.
    """
    centre = hflip_points(params[..., :2], widths, flip)
    rot = torch.where(_bshape(to_device(flip, params.device), 2), -params[..., 4], params[..., 4])
    return torch.cat([centre, params[..., 2:4], rot.unsqueeze(-1)], dim=-1)


def _nearest_index(start: torch.Tensor, length: torch.Tensor, n_out: int) -> torch.Tensor:
    """``(B, n_out)`` source index of each output pixel centre (exact integer arithmetic)."""
    j = torch.arange(n_out, device=start.device, dtype=torch.int64)
    length = length.to(torch.int64)
    src = ((2 * j + 1).unsqueeze(0) * length.unsqueeze(1)) // (2 * n_out)
    src = torch.minimum(src, (length - 1).clamp(min=0).unsqueeze(1))
    return src + start.to(torch.int64).unsqueeze(1)


def _nearest_float(start: torch.Tensor, length: torch.Tensor, n_out: int, limit: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, n_out)`` source index under each output pixel centre of a fractional box
    (``floor(start + (j + 0.5) * length / n_out)``, clamped to ``[0, limit)``) and whether it
    was inside before clamping."""
    j = torch.arange(n_out, device=start.device, dtype=torch.float32) + 0.5
    src = torch.floor(start.unsqueeze(1) + j.unsqueeze(0) * (length / n_out).unsqueeze(1))
    inside = (src >= 0) & (src < limit)
    return src.clamp(0, max(limit - 1, 0)).to(torch.int64), inside


def resized_crop_masks(
    masks: torch.Tensor,
    valid: torch.Tensor,
    crop_boxes: torch.Tensor,
    out_size: tuple[int, int],
    min_visible: float = 0.25,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks through a nearest-neighbour resized crop.

    Output pixel ``(i, j)`` takes the source pixel under its centre
    ``(left + (j + 0.5) * width / out_w, top + (i + 0.5) * height / out_h)`` (integer
    arithmetic for integer boxes; float32 for the fractional boxes of windows, 0 where the
    centre falls outside the batch).

    Args:
        masks: (B, M, H, W) uint8.
        valid: (B, M) bool validity.
        crop_boxes: (B, 4) crop boxes (top, left, height, width): integers, or floats for a
            window's fractional boxes.
        out_size: The crop's output (out_h, out_w).
        min_visible: The fraction of its area (in source pixels) a mask must keep to stay
            valid.

    Returns:
        (masks, valid): (B, M, out_h, out_w) uint8 and the updated validity.
    """
    b, m, h, w = masks.shape
    oh, ow = out_size
    boxes = to_device(crop_boxes, masks.device)
    bi = torch.arange(b, device=masks.device).view(b, 1, 1, 1)
    mi = torch.arange(m, device=masks.device).view(1, m, 1, 1)
    if boxes.is_floating_point():  # a window (transforms.crop): fractional source boxes
        top, left, height, width = boxes.to(torch.float32).unbind(-1)
        rows, row_in = _nearest_float(top, height, oh, h)
        cols, col_in = _nearest_float(left, width, ow, w)
        out = masks[bi, mi, rows.view(b, 1, oh, 1), cols.view(b, 1, 1, ow)]
        inside = row_in.view(b, 1, oh, 1) & col_in.view(b, 1, 1, ow)
        out = out * inside.to(out.dtype)  # 0 where the window pads
    else:
        top, left, height, width = boxes.to(torch.int64).unbind(-1)
        rows = _nearest_index(top, height, oh).clamp(0, max(h - 1, 0))
        cols = _nearest_index(left, width, ow).clamp(0, max(w - 1, 0))
        out = masks[bi, mi, rows.view(b, 1, oh, 1), cols.view(b, 1, 1, ow)]
    before = masks.sum(dim=(-2, -1), dtype=torch.float32)
    scale = (height * width).to(torch.float32) / float(oh * ow)
    after = out.sum(dim=(-2, -1), dtype=torch.float32) * scale.unsqueeze(1)
    frac = torch.where(before > 0, after / before.clamp(min=1), 1.0)
    return out, valid & (frac >= min_visible)


def hflip_points(xy: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Points mirrored: ``x' = w - x``.

    Args:
        xy: Points (B, ..., 2) x, y.
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The points, mirrored where ``flip`` is set.
    """
    nd = xy.ndim - 1
    w = _bshape(to_device(widths, xy.device).to(xy.dtype), nd)
    x = torch.where(_bshape(to_device(flip, xy.device), nd), w - xy[..., 0], xy[..., 0])
    return torch.stack([x, xy[..., 1]], dim=-1)


def hflip_xyxy(xyxy: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Boxes mirrored, x0/x1 swapped so that x0 <= x1 still holds.

    Args:
        xyxy: Boxes (B, N, 4) x0, y0, x1, y1.
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The boxes, mirrored where ``flip`` is set.
    """
    w = to_device(widths, xyxy.device).to(xyxy.dtype).view(-1, 1)
    flipped = torch.stack(
        [w - xyxy[..., 2], xyxy[..., 1], w - xyxy[..., 0], xyxy[..., 3]], dim=-1
    )
    return torch.where(to_device(flip, xyxy.device).view(-1, 1, 1), flipped, xyxy)


def hflip_corners(corners: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Rotated boxes mirrored and reordered ``[1, 0, 3, 2]``.

    Corner 0 stays the box's own top-left and the order stays clockwise (the rotation becomes
    ``-r``).

    Args:
        corners: Rotated boxes (B, N, 4, 2).
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The corners, mirrored where ``flip`` is set.
    """
    m = hflip_points(corners, widths, flip)
    # corners [1, 0, 3, 2] by select views: a Python list as the index would be a host tensor
    # copied to the device, which CUDA waits for (seen as a host sync on an H200)
    mirrored = torch.stack([m[..., 1, :], m[..., 0, :], m[..., 3, :], m[..., 2, :]], dim=-2)
    return torch.where(to_device(flip, corners.device).view(-1, 1, 1, 1), mirrored, corners)


def hflip_masks(masks: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Masks with their columns mirrored within each sample's valid width.

    Args:
        masks: (B, M, H, W).
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The masks, mirrored where ``flip`` is set.
    """
    b, m, h, w = masks.shape
    j = torch.arange(w, device=masks.device).view(1, w)
    wv = to_device(widths, masks.device).to(torch.int64).view(b, 1)
    src = torch.where(to_device(flip, masks.device).view(b, 1) & (j < wv), wv - 1 - j, j)
    return masks.gather(-1, src.view(b, 1, 1, w).expand(b, m, h, w))


def corners_from_xywhr(xywhr: torch.Tensor) -> torch.Tensor:
    """Label Studio rectangles to corners.

    Args:
        xywhr: (..., 5) x, y, w, h, rotation (degrees, clockwise about the top-left corner).

    Returns:
        (..., 4, 2) corners, clockwise from the top-left.
    """
    x, y, w, h, r = xywhr.unbind(-1)
    rad = torch.deg2rad(r)
    c, s = torch.cos(rad), torch.sin(rad)
    xs = torch.stack([x, x + w * c, x + w * c - h * s, x - h * s], dim=-1)
    ys = torch.stack([y, y + w * s, y + w * s + h * c, y + h * c], dim=-1)
    return torch.stack([xs, ys], dim=-1)


def xywhr_from_corners(corners: torch.Tensor) -> torch.Tensor:
    """Corners to x, y, w, h, rotation from corner 0 and its two edges.

    Exact for rectangles; after an anisotropic resize the shape is a parallelogram and w, h are
    its edge lengths.

    Args:
        corners: (..., 4, 2), clockwise from the box's top-left.

    Returns:
        (..., 5) x, y, w, h, rotation (degrees).
    """
    c0, c1, c3 = corners[..., 0, :], corners[..., 1, :], corners[..., 3, :]
    e1 = c1 - c0
    e3 = c3 - c0
    w = torch.linalg.vector_norm(e1, dim=-1)
    h = torch.linalg.vector_norm(e3, dim=-1)
    r = torch.rad2deg(torch.atan2(e1[..., 1], e1[..., 0]))
    return torch.stack([c0[..., 0], c0[..., 1], w, h, r], dim=-1)


def resized_crop_geometry(
    batch: Batch, crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float = 0.25
) -> Batch:
    """The geometry keys of a batch through a resized crop.

    Only the keys present; each kind maps its own (``Kind.resized_crop`` in
    ``npu_data/kinds``).

    Args:
        batch: A batch dict (boxes, polygons, keypoints, masks, ... as the kinds name them).
        crop_boxes: (B, 4) crop boxes (top, left, height, width), host or device.
        out_size: The crop's output (out_h, out_w).
        min_visible: The fraction of its area a shape must keep to stay valid.

    Returns:
        The mapped geometry keys (the image is not among them).
    """
    from npu_data.transforms import geometry  # this module, the kernels G (mypy checks it
    # against kinds.protocols.GeometryKernels: the kinds sit below and never import it)

    out: Batch = {}
    for kind in KINDS:
        out.update(kind.resized_crop(batch, crop_boxes, out_size, min_visible, geometry))
    return out


def hflip_geometry(batch: Batch, widths: torch.Tensor, flip: torch.Tensor) -> Batch:
    """The geometry keys of a batch mirrored (``Kind.hflip`` of each kind).

    Args:
        batch: A batch dict.
        widths: (B,) valid width of each sample.
        flip: (B,) bool: which samples to mirror.

    Returns:
        The mirrored geometry keys.
    """
    from npu_data.transforms import geometry  # this module, the kernels G

    out: Batch = {}
    for kind in KINDS:
        out.update(kind.hflip(batch, widths, flip, geometry))
    return out
