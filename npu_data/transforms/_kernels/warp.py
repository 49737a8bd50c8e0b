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


def _grid(col: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    return col.unsqueeze(1) + row.unsqueeze(2)  # (B, H, W)


def _gather(flat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``flat (B, C, N)`` read at ``index (B, P)`` for every channel: ``(B, C, P)``."""
    return torch.gather(flat, 2, index.unsqueeze(1).expand(-1, flat.shape[1], -1))


def warp(images: torch.Tensor, sizes: torch.Tensor, out_sizes: torch.Tensor,
         tables: tuple[torch.Tensor, ...], bilinear: bool, fill: torch.Tensor) -> torch.Tensor:
    """Warp each sample of ``images (B, C, H, W)`` into ``(B, C, h, w)``, ``h, w`` the tables'
    lengths (``row_x (B, h)``, ``col_x (B, w)``); ``fill (C,)`` uint8."""
    dev = images.device
    b, c, h_in, w_in = images.shape
    out_h, out_w = tables[1].shape[1], tables[0].shape[1]
    parts = warp_parts(tables, fill)
    with riding(parts):  # host tables: one copy, or with an earlier one
        col_x, row_x, col_y, row_y, fills = (take(k, v, dev) for k, v in parts.items())
    n_out = out_h * out_w  # no -1 in the views: an empty batch has no size to infer
    # host sizes of full batches (no padding in or out): plain numbers, no masks
    full = filled(sizes, h_in, w_in) and filled(out_sizes, out_h, out_w)
    src_h: torch.Tensor | int = h_in
    src_w: torch.Tensor | int = w_in
    if not full:
        src_h = to_device(sizes[:, 0], dev).to(torch.int64).view(b, 1, 1)
        src_w = to_device(sizes[:, 1], dev).to(torch.int64).view(b, 1, 1)
    gx, gy = _grid(col_x, row_x), _grid(col_y, row_y)
    flat = images.reshape(b, c, h_in * w_in)
    if bilinear:
        unit = 1 << BILINEAR_SHIFT
        inside = (gx >= 0) & (gx < src_w * unit) & (gy >= 0) & (gy < src_h * unit)
        gx, gy = gx - unit // 2, gy - unit // 2
        x0, y0 = _floor_shift(gx, BILINEAR_SHIFT), _floor_shift(gy, BILINEAR_SHIFT)
        drop = BILINEAR_SHIFT - _WEIGHT_BITS
        fx = _floor_shift(gx - x0 * unit, drop).view(b, 1, n_out)
        fy = _floor_shift(gy - y0 * unit, drop).view(b, 1, n_out)
        xa, xb = _clip(x0, src_w), _clip(x0 + 1, src_w)
        ya, yb = _clip(y0, src_h), _clip(y0 + 1, src_h)
        rows_a, rows_b = (ya * w_in).view(b, n_out), (yb * w_in).view(b, n_out)
        xa, xb = xa.view(b, n_out), xb.view(b, n_out)
        p00, p01 = _gather(flat, rows_a + xa).long(), _gather(flat, rows_a + xb).long()
        p10, p11 = _gather(flat, rows_b + xa).long(), _gather(flat, rows_b + xb).long()
        one = 1 << _WEIGHT_BITS
        top = p00 * one + (p01 - p00) * fx
        bottom = p10 * one + (p11 - p10) * fx
        value = _floor_shift(top * one + (bottom - top) * fy, 2 * _WEIGHT_BITS)
        pixels = value.to(torch.uint8)
    else:
        xi, yi = _floor_shift(gx, NEAREST_SHIFT), _floor_shift(gy, NEAREST_SHIFT)
        inside = (xi >= 0) & (xi < src_w) & (yi >= 0) & (yi < src_h)
        index = torch.where(inside, yi * w_in + xi, 0).view(b, n_out)
        pixels = _gather(flat, index)
    out = torch.where(inside.view(b, 1, n_out), pixels, fills)
    if not full:
        oy = torch.arange(out_h, device=dev).view(1, out_h, 1)
        ox = torch.arange(out_w, device=dev).view(1, 1, out_w)
        osz = to_device(out_sizes, dev).to(torch.int64)
        valid = (oy < osz[:, 0].view(b, 1, 1)) & (ox < osz[:, 1].view(b, 1, 1))
        out = torch.where(valid.view(b, 1, n_out), out, torch.zeros_like(out))
    return out.view(b, c, out_h, out_w)


def warp_parts(tables: tuple[torch.Tensor, ...], fill: torch.Tensor) -> dict[str, torch.Tensor]:
    """What :func:`warp` copies to the device, by name (``_kernels.take``): the four tables
    and the fill ``(1, C, 1)`` uint8."""
    parts = dict(zip(("warp.col_x", "warp.row_x", "warp.col_y", "warp.row_y"), tables,
                     strict=True))
    parts["warp.fill"] = fill.to(torch.uint8).view(1, -1, 1)
    return parts


def _clip(v: torch.Tensor, size: torch.Tensor | int) -> torch.Tensor:
    """``v`` clamped to ``0 .. size - 1`` (``size`` per sample, or one number)."""
    if isinstance(size, int):
        return v.clamp(0, size - 1)
    return v.clamp(min=0).minimum(size - 1)


def vflip(images: torch.Tensor, sizes: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror each sample where ``flip (B,)`` top-bottom within its valid height."""
    b, c, height, width = images.shape
    flip = to_device(flip, images.device).to(torch.bool).view(-1, 1)
    rows = torch.arange(height, device=images.device).view(1, height)
    h = to_device(sizes[:, 0], images.device).to(torch.int64).view(-1, 1)
    src = torch.where(flip & (rows < h), h - 1 - rows, rows)  # (B, H)
    return torch.gather(images, 2, src.view(b, 1, height, 1).expand(b, c, height, width))
