"""The torch warps: each output pixel read from its source point (``warp_tables``), and
``vflip``: integer ops and gathers only, the whole batch in a few launches.

The source point of output ``(x, y)`` is ``col_x[x] + row_x[y]``, ``col_y[x] + row_y[y]`` in
fixed point (int64, no float). Nearest takes the pixel under it; bilinear interpolates the
four around it with 24-bit weights in int64 and truncates as Pillow does. Points outside a
sample's valid source give ``fill``; pixels outside its valid output are 0.
"""

from __future__ import annotations

import torch

from npu_data.transforms._kernels import riding, take, to_device
from npu_data.transforms._kernels.pixel import filled
from npu_data.transforms._kernels.warp_tables import BILINEAR_SHIFT, NEAREST_SHIFT

_WEIGHT_BITS = 24


def _floor_shift(v: torch.Tensor, bits: int) -> torch.Tensor:
    """``v >> bits`` (floor) as a floor division: the ops of docs/device-ops.md."""
    return torch.div(v, 1 << bits, rounding_mode="floor")


def _gather(flat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``flat (B, C, N)`` read at ``index (B, P)`` for every channel: ``(B, C, P)``."""
    return torch.gather(flat, 2, index.unsqueeze(1).expand(-1, flat.shape[1], -1))


def warp(images: torch.Tensor, sizes: torch.Tensor, out_sizes: torch.Tensor,
         tables: tuple[torch.Tensor, ...], bilinear: bool, fill: torch.Tensor) -> torch.Tensor:
    """Warp each sample of ``images (B, C, H, W)`` into ``(B, C, h, w)``, ``h, w`` the tables'
    lengths (``row_x (B, h)``, ``col_x (B, w)``); ``fill (C,)`` uint8.

    Both coordinates run as one ``(B, 2, h, w)`` tensor (x, y), and the four bilinear
    neighbours are read by one gather: about 20 device ops for either filter."""
    dev = images.device
    b, c, h_in, w_in = images.shape
    out_h, out_w = tables[1].shape[1], tables[0].shape[1]
    # host sizes of full batches (no padding in or out): plain numbers, no masks
    full = filled(sizes, h_in, w_in) and filled(out_sizes, out_h, out_w)
    parts = warp_parts(tables, fill, bilinear, (h_in, w_in) if full else None)
    with riding(parts):  # host tables: one copy, or with an earlier one
        got = {k: take(k, v, dev) for k, v in parts.items()}
    if full:
        box, clip = got["warp.box"], got["warp.clip"]
    else:
        box, clip = _device_bounds(sizes, bilinear, dev)
    n_out = out_h * out_w  # no -1 in the views: an empty batch has no size to infer
    g = got["warp.cols"].unsqueeze(2) + got["warp.rows"].unsqueeze(3)  # (B, 2, h, w): x, y
    flat = images.reshape(b, c, h_in * w_in)
    if bilinear:
        inside = (torch.clamp(g, box[0], box[1]) == g).all(1)  # (B, h, w)
        q = _floor_shift(g, BILINEAR_SHIFT)  # (x0, y0): the tables start half a pixel back
        frac = _floor_shift(g - q * (1 << BILINEAR_SHIFT), BILINEAR_SHIFT - _WEIGHT_BITS
                            ).view(b, 2, 1, n_out)
        # (B, 2 (low, high), 2 (x, y), h, w): the neighbours' coordinates, clipped
        near = torch.clamp(q.unsqueeze(1) + got["warp.step"], clip[0].unsqueeze(1),
                           clip[1].unsqueeze(1))
        # (B, 2 (y), 2 (x), h, w): their flat indices, read by one gather
        index = torch.add(near[:, :, 0].unsqueeze(1), near[:, :, 1].unsqueeze(2), alpha=w_in)
        p = _gather(flat, index.view(b, 4 * n_out)).long().view(b, c, 2, 2, n_out)
        one = 1 << _WEIGHT_BITS
        left, right = p[:, :, :, 0], p[:, :, :, 1]  # (B, C, 2 (y), n)
        lerp = torch.add((right - left) * frac[:, 0:1], left, alpha=one)  # top, bottom
        top, bottom = lerp[:, :, 0], lerp[:, :, 1]
        value = _floor_shift(torch.add((bottom - top) * frac[:, 1], top, alpha=one),
                             2 * _WEIGHT_BITS)
        pixels = value.to(torch.uint8)
    else:
        q = _floor_shift(g, NEAREST_SHIFT)  # (x, y) of the pixel under each point
        inside = (torch.clamp(q, box[0], box[1]) == q).all(1)  # (B, h, w)
        index = torch.where(inside, torch.add(q[:, 0], q[:, 1], alpha=w_in), 0).view(b, n_out)
        pixels = _gather(flat, index)
    out = torch.where(inside.view(b, 1, n_out), pixels, got["warp.fill"])
    if not full:
        oy = torch.arange(out_h, device=dev).view(1, out_h, 1)
        ox = torch.arange(out_w, device=dev).view(1, 1, out_w)
        osz = to_device(out_sizes, dev).to(torch.int64)
        valid = (oy < osz[:, 0].view(b, 1, 1)) & (ox < osz[:, 1].view(b, 1, 1))
        out = torch.where(valid.view(b, 1, n_out), out, torch.zeros_like(out))
    return out.view(b, c, out_h, out_w)


def _box(last: torch.Tensor, bilinear: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(box, clip)`` of sources whose last pixel is ``last`` (..., 2, 1, 1) (x, y): the
    fixed-point points inside (bilinear: the tables' point, half a pixel back, from
    ``-unit / 2`` to ``size * unit - unit / 2 - 1``; nearest: the pixel from 0 to ``last``),
    and the pixels the neighbours are clipped to, each stacked (low, high)."""
    clip = torch.stack([torch.zeros_like(last), last])
    if not bilinear:
        return clip, clip
    unit, half = 1 << BILINEAR_SHIFT, 1 << (BILINEAR_SHIFT - 1)
    box = torch.stack([torch.full_like(last, -half), last * unit + (unit - half - 1)])
    return box, clip


def _device_bounds(sizes: torch.Tensor, bilinear: bool, dev: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_box` of each sample's valid size ``(2, B, 2, 1, 1)``, made where ``sizes``
    are and moved to ``dev`` (a padded batch)."""
    s = sizes.to(torch.int64)
    last = (torch.stack([s[:, 1], s[:, 0]], 1) - 1).view(-1, 2, 1, 1)
    box, clip = _box(last, bilinear)
    return to_device(box, dev), to_device(clip, dev)


# (1, 2, 1, 1, 1): the low and the high neighbour of a point along each axis
_STEP = torch.tensor([0, 1], dtype=torch.int64).view(1, 2, 1, 1, 1)


def warp_parts(tables: tuple[torch.Tensor, ...], fill: torch.Tensor, bilinear: bool,
               shape: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
    """What :func:`warp` copies to the device, by name (``_kernels.take``): the column tables
    ``(B, 2, w)`` (x, y; bilinear: the point minus half a pixel, where the neighbours
    start), the row tables ``(B, 2, h)``, the fill ``(1, C, 1)`` uint8, the neighbours'
    steps, and for a full ``shape`` (height, width) batch the bounds (:func:`_box`)."""
    col_x, row_x, col_y, row_y = tables
    cols = torch.stack([col_x, col_y], 1)
    if bilinear:
        cols = cols - (1 << (BILINEAR_SHIFT - 1))
    parts = {"warp.cols": cols, "warp.rows": torch.stack([row_x, row_y], 1),
             "warp.fill": fill.to(torch.uint8).view(1, -1, 1), "warp.step": _STEP}
    if shape is not None:
        last = torch.tensor([shape[1] - 1, shape[0] - 1], dtype=torch.int64).view(1, 2, 1, 1)
        parts["warp.box"], parts["warp.clip"] = _box(last, bilinear)
    return parts


def vflip(images: torch.Tensor, sizes: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror each sample where ``flip (B,)`` top-bottom within its valid height."""
    b, c, height, width = images.shape
    flip = to_device(flip, images.device).to(torch.bool).view(-1, 1)
    rows = torch.arange(height, device=images.device).view(1, height)
    h = to_device(sizes[:, 0], images.device).to(torch.int64).view(-1, 1)
    src = torch.where(flip & (rows < h), h - 1 - rows, rows)  # (B, H)
    return torch.gather(images, 2, src.view(b, 1, height, 1).expand(b, c, height, width))
