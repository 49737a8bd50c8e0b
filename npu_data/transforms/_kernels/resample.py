"""Pillow ``BILINEAR`` resampling of per-sample crops, batched and integer-exact.

Pillow resizes each axis separately (horizontal pass first, over the rows the vertical
pass needs), with 22-bit fixed-point weights and an 8-bit intermediate. Here the weights are
built on the device for every sample from its crop box, in float64 exactly as Pillow
computes them, and applied as banded batched matmuls: the output of one axis is split into
tiles of ``tile`` positions, each tile reads one window of consecutive input positions, and a
``(window, tile)`` weight matrix maps the window to the tile. Products are summed in float32,
exactly: the 22-bit weight is split into a high part (bits 7..21) and a low part (bits 0..6)
so that every partial sum is an integer below 2**24; the two sums are recombined in int32.
"""

from __future__ import annotations

import math

import torch

PRECISION_BITS = 22
_LOW_BITS = 7
# float32 sums of pixel * low-weight stay below 2**24 while a window has fewer taps than this.
_MAX_EXACT_TAPS = (1 << 24) // (255 * ((1 << _LOW_BITS) - 1)) - 1


def coefficients(
    in_size: torch.Tensor, out_size: int, taps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pillow's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` for a batch of extents.

    ``in_size`` (B,) int64: the crop extent along the axis. Returns ``xmin`` (B, out) int64,
    the first input index of each output, and ``weights`` (B, out, taps) int64 fixed point.
    """
    dev = in_size.device
    size = in_size.to(torch.float64)[:, None]  # (B, 1)
    scale = size / out_size
    filterscale = torch.clamp(scale, min=1.0)
    support = filterscale * 1.0
    xx = torch.arange(out_size, device=dev, dtype=torch.float64)[None, :]
    center = (xx + 0.5) * scale  # (B, out); in0 = 0.0 adds nothing
    ss = 1.0 / filterscale
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0.0)
    xmax = torch.minimum(torch.trunc(center + support + 0.5), size)
    count = (xmax - xmin)[..., None]  # (B, out, 1)
    x = torch.arange(taps, device=dev, dtype=torch.float64)
    t = ((x + xmin[..., None]) - center[..., None] + 0.5) * ss[..., None]
    w = torch.clamp(1.0 - t.abs(), min=0.0)
    w = torch.where(x < count, w, torch.zeros((), dtype=torch.float64, device=dev))
    # Pillow sums the taps left to right: a cumulative sum's last entry does the same.
    ww = torch.cumsum(w, dim=-1)[..., -1:]
    k = torch.where(ww != 0.0, w / torch.where(ww != 0.0, ww, 1.0), w)
    fixed = torch.trunc(0.5 + k * float(1 << PRECISION_BITS)).to(torch.int64)
    return xmin.to(torch.int64), fixed


def taps_bound(in_extent: int, out_size: int) -> int:
    """Pillow's kernel size for the largest possible scale ``in_extent / out_size``."""
    return 2 * max(1, -(-in_extent // out_size)) + 1


def resample_last(
    x: torch.Tensor, start: torch.Tensor, extent: torch.Tensor, out_size: int, tile: int = 8
) -> torch.Tensor:
    """Resize the last axis of ``x`` (B, N, L) uint8: per sample the span
    ``[start, start + extent)`` goes to ``out_size`` positions. Returns (B, N, out_size) uint8.
    """
    bsz, n, length = x.shape
    dev = x.device
    taps = min(taps_bound(length, out_size), length + 2)
    xmin, weights = coefficients(extent, out_size, taps)
    tile = max(1, min(tile, out_size))
    n_tiles = -(-out_size // tile)
    padded = n_tiles * tile
    if padded != out_size:  # extra outputs get zero weights and are dropped at the end
        xmin = torch.cat([xmin, xmin[:, -1:].expand(bsz, padded - out_size)], dim=1)
        weights = torch.cat(
            [weights, weights.new_zeros(bsz, padded - out_size, taps)], dim=1
        )
    smax = length / out_size
    window = min(length, math.ceil((tile - 1) * smax) + taps + 2)
    xmin_t = xmin.view(bsz, n_tiles, tile)
    first = xmin_t[:, :, :1]  # (B, T, 1)
    offset = xmin_t - first  # (B, T, tile) tap-0 position inside the window
    pos = torch.arange(window, device=dev)
    k = pos[None, None, :, None] - offset[:, :, None, :]  # (B, T, window, tile)
    valid = (k >= 0) & (k < taps)
    w_t = weights.view(bsz, n_tiles, tile, taps)
    gathered = torch.gather(
        w_t.unsqueeze(2).expand(bsz, n_tiles, window, tile, taps),
        4,
        k.clamp(0, taps - 1).unsqueeze(-1),
    ).squeeze(-1)
    mat = torch.where(valid, gathered, torch.zeros((), dtype=torch.int64, device=dev))
    # window start, clamped so the window stays inside the array (offsets shift to match)
    begin = start.view(bsz, 1, 1).to(torch.int64) + first  # (B, T, 1)
    shift = torch.clamp(begin + window - length, min=0)
    begin = begin - shift
    mat = _shift_rows(mat, shift)
    if taps <= _MAX_EXACT_TAPS:
        hi = (mat >> _LOW_BITS).to(torch.float32)
        lo = (mat & ((1 << _LOW_BITS) - 1)).to(torch.float32)
        m = torch.cat([hi, lo], dim=-1)  # (B, T, window, 2*tile)
        dtype = torch.float32
    else:
        m = mat.to(torch.float64)
        dtype = torch.float64
    cols = begin + pos.view(1, 1, window)  # (B, T, window)
    xw = torch.gather(
        x.unsqueeze(1).expand(bsz, n_tiles, n, length),
        3,
        cols.unsqueeze(2).expand(bsz, n_tiles, n, window),
    )
    y = torch.matmul(xw.to(dtype), m)  # (B, T, N, 2*tile) or (B, T, N, tile)
    if dtype == torch.float32:
        acc = (y[..., :tile].to(torch.int32) << _LOW_BITS) + y[..., tile:].to(torch.int32)
    else:
        acc = y.to(torch.int64)
    out = ((acc + (1 << (PRECISION_BITS - 1))) >> PRECISION_BITS).clamp_(0, 255)
    out = out.to(torch.uint8).permute(0, 2, 1, 3).reshape(bsz, n, padded)
    return out[:, :, :out_size]


def _shift_rows(mat: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Move window rows down by ``shift`` (B, T, 1) positions (the window start moved left)."""
    window = mat.shape[2]
    src = torch.arange(window, device=mat.device).view(1, 1, window) - shift  # (B, T, window)
    ok = (src >= 0).unsqueeze(-1)
    picked = torch.gather(mat, 2, src.clamp(min=0).unsqueeze(-1).expand_as(mat))
    return torch.where(ok, picked, torch.zeros((), dtype=mat.dtype, device=mat.device))


def vertical_first_rule() -> bool:
    """Whether the installed Pillow (13 and later) may run the vertical pass first: when the
    height shrinks by more than twice as many pixels as the width."""
    return _PILLOW_13


def _pillow_at_least_13() -> bool:
    import PIL

    try:
        return int(PIL.__version__.split(".")[0]) >= 13
    except ValueError:
        return True


_PILLOW_13 = _pillow_at_least_13()
