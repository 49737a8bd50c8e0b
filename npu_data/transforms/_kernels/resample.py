"""Pillow ``BILINEAR`` resampling of per-sample crops, batched and integer-exact.

Pillow resizes each axis separately, with 22-bit fixed-point weights and an 8-bit
intermediate. The weights depend only on the crop's extent along the axis and the output
size, so they are computed once on the host, in float64 with numpy exactly as Pillow's
``precompute_coeffs`` + ``normalize_coeffs_8bpc`` do, for every extent up to a bound, and kept
on the device as int32 tables (:func:`weight_tables`); a batch gathers its rows by extent. No
float64 reaches the device and nothing is read back from it.

A pass (:func:`resample_rows`) is a sum over the filter's taps: tap ``t`` gathers, for every
output position, the whole input row ``xmin + t`` (``index_select`` of contiguous rows) and
adds it times the int32 weight. Every product and sum is an int32 below 2**31
(255 * 2**22 * (1 + taps * 2**-22)), so the result is exact on any device and no matmul
precision setting (TF32/HF32, bf16) can touch it.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from npu_data.transforms._kernels import to_device

PRECISION_BITS = 22
_HALF = 1 << (PRECISION_BITS - 1)


def taps_bound(in_extent: int, out_size: int) -> int:
    """Pillow's kernel size for the largest possible scale ``in_extent / out_size``."""
    return 2 * max(1, -(-in_extent // out_size)) + 1


def coefficients_np(extents: np.ndarray, out_size: int, taps: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's ``precompute_coeffs`` (bilinear, ``in0 = 0``) + ``normalize_coeffs_8bpc`` for
    crop extents ``extents`` (E,), in float64 on the host, operation for operation.

    Returns ``xmin`` (E, out) int32, the first input index of each output, and ``weights``
    (E, out, taps) int32 fixed point (0 past each output's own tap count).
    """
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)  # (E, 1)
    scale = size / out_size
    filterscale = np.maximum(scale, 1.0)
    support = filterscale * 1.0
    xx = np.arange(out_size, dtype=np.float64)[None, :]
    center = (xx + 0.5) * scale  # (E, out); in0 = 0.0 adds nothing
    ss = 1.0 / filterscale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0.0)
    xmax = np.minimum(np.trunc(center + support + 0.5), size)
    count = (xmax - xmin)[..., None]  # (E, out, 1)
    x = np.arange(taps, dtype=np.float64)
    t = ((x + xmin[..., None]) - center[..., None] + 0.5) * ss[..., None]
    w = np.maximum(1.0 - np.abs(t), 0.0)
    w = np.where(x < count, w, 0.0)
    ww = np.zeros(w.shape[:-1] + (1,), dtype=np.float64)
    for k in range(taps):  # Pillow sums the taps left to right
        ww = ww + w[..., k : k + 1]
    k_norm = np.where(ww != 0.0, w / np.where(ww != 0.0, ww, 1.0), w)
    fixed = np.trunc(0.5 + k_norm * float(1 << PRECISION_BITS))
    return xmin.astype(np.int32), fixed.astype(np.int32)


def window_coefficients_np(extents: np.ndarray, fulls: np.ndarray, offsets: np.ndarray,
                           out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's coefficients for outputs ``[offset, offset + out_size)`` of a resize of each
    extent (E,) to ``fulls`` (E,) — "resize the whole axis, then keep a window" — in float64
    on the host, operation for operation as :func:`coefficients_np` (``center = (X + 0.5) *
    scale`` with ``X = offset + xx``; ``xmin``/``xmax`` clipped to the whole extent). Outputs
    outside ``[0, full)`` (padding) get no taps: they come out 0.

    Returns ``xmin`` (E, out) int32 and ``weights`` (E, out, taps) int32, ``taps`` the widest
    filter of the batch.
    """
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)  # (E, 1)
    full = np.asarray(fulls, dtype=np.float64).reshape(-1, 1)
    taps = max((taps_bound(int(e), int(f)) for e, f in zip(size[:, 0], full[:, 0],
                                                            strict=True)), default=1)
    scale = size / full
    filterscale = np.maximum(scale, 1.0)
    support = filterscale * 1.0
    big_x = np.asarray(offsets, dtype=np.float64).reshape(-1, 1) + np.arange(out_size)[None, :]
    inside = (big_x >= 0) & (big_x < full)
    center = (big_x + 0.5) * scale
    ss = 1.0 / filterscale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0.0)
    xmax = np.minimum(np.trunc(center + support + 0.5), size)
    xmin = np.where(inside, xmin, 0.0)
    count = np.where(inside, xmax - xmin, 0.0)[..., None]
    x = np.arange(taps, dtype=np.float64)
    t = ((x + xmin[..., None]) - center[..., None] + 0.5) * ss[..., None]
    w = np.maximum(1.0 - np.abs(t), 0.0)
    w = np.where(x < count, w, 0.0)
    ww = np.zeros(w.shape[:-1] + (1,), dtype=np.float64)
    for k in range(taps):  # Pillow sums the taps left to right
        ww = ww + w[..., k : k + 1]
    k_norm = np.where(ww != 0.0, w / np.where(ww != 0.0, ww, 1.0), w)
    fixed = np.trunc(0.5 + k_norm * float(1 << PRECISION_BITS))
    return xmin.astype(np.int32), fixed.astype(np.int32)


def window_support(extents: np.ndarray, fulls: np.ndarray, offsets: np.ndarray,
                   out_size: int) -> np.ndarray:
    """(E, 2) int64 ``[first, last)``: the input indices the outputs ``[offset, offset +
    out_size)`` of each ``extent -> full`` resize read (Pillow's ``xmin``/``xmax``, the same
    arithmetic as :func:`window_coefficients_np`); ``first == last == 0`` when none."""
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)
    full = np.asarray(fulls, dtype=np.float64).reshape(-1, 1)
    scale = size / full
    support = np.maximum(scale, 1.0)
    big_x = np.asarray(offsets, dtype=np.float64).reshape(-1, 1) + np.arange(out_size)[None, :]
    inside = (big_x >= 0) & (big_x < full)
    center = (big_x + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0.0)
    xmax = np.minimum(np.trunc(center + support + 0.5), size)
    used = inside & (xmax > xmin)
    first = np.where(used, xmin, np.inf).min(axis=1)
    last = np.where(used, xmax, -np.inf).max(axis=1)
    any_used = used.any(axis=1)
    return np.stack([np.where(any_used, first, 0), np.where(any_used, last, 0)],
                    axis=1).astype(np.int64)


Tables = tuple[torch.Tensor, torch.Tensor]  # per-sample (xmin (B, out), weights (B, out, taps))


def window_tables(extents: torch.Tensor, fulls: torch.Tensor, offsets: torch.Tensor,
                  out_size: int, device: torch.device) -> Tables:
    """:func:`window_coefficients_np` of host (B,) tensors, on ``device`` as int32 tables."""
    xmin, w = window_coefficients_np(extents.numpy(), fulls.numpy(), offsets.numpy(), out_size)
    return (to_device(torch.from_numpy(xmin), device), to_device(torch.from_numpy(w), device))


_TABLES: dict[tuple[int, str], tuple[int, torch.Tensor, torch.Tensor]] = {}
_TABLES_LOCK = threading.Lock()


def _extent_cap(length: int) -> int:
    """Tables cover extents 1..cap, cap the next power of two (at least 64) >= ``length``."""
    return max(64, 1 << (max(1, length) - 1).bit_length())


def weight_tables(out_size: int, length: int, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(xmin (E, out) int32, weights (E, out, taps) int32)`` on ``device`` for every crop
    extent ``1..E`` with ``E >= length`` (row ``e - 1`` is extent ``e``): built on the host
    once per output size and device (again only when a longer axis comes), then gathered."""
    key = (out_size, str(device))
    cap = _extent_cap(length)
    got = _TABLES.get(key)
    if got is None or got[0] < cap:
        with _TABLES_LOCK:
            got = _TABLES.get(key)
            if got is None or got[0] < cap:
                xmin, w = coefficients_np(np.arange(1, cap + 1), out_size,
                                          taps_bound(cap, out_size))
                got = (cap, to_device(torch.from_numpy(xmin), device),
                       to_device(torch.from_numpy(w), device))
                _TABLES[key] = got
    return got[1], got[2]


def resample_rows(x: torch.Tensor, start: torch.Tensor, extent: torch.Tensor, out_size: int,
                  tables: Tables | None = None) -> torch.Tensor:
    """Resize axis 1 of ``x`` (B, L, R) (0..255 values, uint8 or int32): per sample the rows
    ``[start, start + extent)`` go to ``out_size`` rows. Returns (B, out_size, R) int32 in
    0..255 (Pillow's 8-bit result, not yet narrowed).

    ``start`` and ``extent`` are (B,) integer tensors on ``x``'s device; ``taps`` follows
    from the shape alone (the widest filter an extent <= L can need), so nothing is read back.
    ``tables``: per-sample coefficients made on the host (:func:`window_tables`) instead.
    """
    bsz, length, r = x.shape
    dev = x.device
    if tables is not None:
        xmin, weights = tables
        taps = weights.shape[-1]
    else:
        table_x, table_w = weight_tables(out_size, length, dev)
        taps = min(taps_bound(length, out_size), length + 2, table_w.shape[-1])
        row = (extent.to(torch.int64).clamp(1, length) - 1)  # (B,) table rows
        xmin = table_x.index_select(0, row)  # (B, out) int32
        weights = table_w.index_select(0, row)  # (B, out, taps_max) int32
    base = start.to(torch.int64).view(bsz, 1) + xmin  # (B, out) first input row per output
    offset = torch.arange(bsz, device=dev, dtype=torch.int64).view(bsz, 1) * length
    flat = x.reshape(bsz * length, r).to(torch.int32)  # widened once, not once per tap
    acc = torch.full((bsz * out_size, r), _HALF, dtype=torch.int32, device=dev)
    for k in range(taps):
        rows = (base + k).clamp_(0, length - 1) + offset  # zero weight where past the taps
        acc.addcmul_(flat.index_select(0, rows.view(-1)), weights[:, :, k].reshape(-1, 1))
    # 0 <= acc < 256 << 22: the sum of a row's weights is at most 2**22 + taps / 2
    return (acc >> PRECISION_BITS).view(bsz, out_size, r)


def resize_two_passes(x: torch.Tensor, first: tuple[torch.Tensor, torch.Tensor, int],
                      second: tuple[torch.Tensor, torch.Tensor, int],
                      tables: tuple[Tables, Tables] | None = None) -> torch.Tensor:
    """``x`` (B, A, P, C) uint8: resize axis A (``first`` = (start, extent, out)), round to
    8 bits, then axis P (``second``); ``tables``: the two passes' host-made coefficients
    (windows). Returns (B, second out, first out, C) uint8."""
    b, _, p, c = x.shape
    a_start, a_ext, a_out = first
    p_start, p_ext, p_out = second
    a_tab, p_tab = tables if tables is not None else (None, None)
    y = resample_rows(x.contiguous().view(b, x.shape[1], p * c), a_start, a_ext, a_out, a_tab)
    y = y.view(b, a_out, p, c).transpose(1, 2).contiguous().view(b, p, a_out * c)
    z = resample_rows(y, p_start, p_ext, p_out, p_tab)
    return z.to(torch.uint8).view(b, p_out, a_out, c)


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
