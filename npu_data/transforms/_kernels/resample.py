"""Pillow resampling (``BILINEAR``, ``BICUBIC``, ``LANCZOS``) of per-sample regions, batched,
integer-exact, few device ops.

Pillow resizes each axis separately with 22-bit fixed-point weights and an 8-bit intermediate
(clipped to 0..255: bicubic and Lanczos weights can be negative).
The weights of one axis depend only on the region's extent and the output positions, so they
are made on the host in float64 with numpy exactly as Pillow's ``precompute_coeffs`` +
``normalize_coeffs_8bpc`` (:func:`coefficients_np`; :func:`window_coefficients_np` for a window
of a full resize), cached per output size for every extent (:func:`weight_tables`), and a batch
picks its rows per sample (:func:`extent_tables`). No float64 reaches the device.

:func:`resample_batch` runs a whole batch, each sample in its own pass order, as:

1. one gather of every sample's region into a *canvas* ``(B, L1, L2, C)`` in its own frame:
   the axis its first pass resizes is the canvas's rows (the image transposed for samples
   whose first pass is horizontal), so every sample's first pass gathers whole canvas rows;
2. pass 1: for each output position a window of ``T`` consecutive canvas rows (a padded
   fixed-tap table, the flip folded in) times int32 weights, summed in int32 — exact in any
   order and under any matmul precision (there is no matmul) — then rounded to 8 bits
   (``& -2**22``, then an exact division by ``2**22``: no ``>>``, which Ascend runs on its
   AICPU) into an intermediate laid out for pass 2's rows;
3. pass 2 the same on that intermediate, then one ``where`` turns the samples whose frame
   was transposed back.

The tap sums run either tap by tap (an in-place ``addcmul_`` per tap: memory of one pass
output) or all taps at once (one gather + one ``addcmul`` + one ``sum``), the batch in as many
chunks as the memory budget needs (:func:`plan_pass`, from shapes only): small inputs have
few taps and large ones room for all taps, so a whole crop takes a near-constant ~30 ops.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from npu_data.transforms._kernels import compiling, host_values, riding, take, to_device, upload

PRECISION_BITS = 22
_HALF = 1 << (PRECISION_BITS - 1)
_KEEP = -(1 << PRECISION_BITS)  # ``acc & _KEEP``: the multiple of 2**22 below ``acc``
_SCALE = 1 << PRECISION_BITS

# Peak device memory a call may allocate, as a multiple of the input batch's bytes
# (``tests`` and ``npu_data.bench.kernels`` read and set it); passes chunk the batch to stay below.
MEMORY_BUDGET = 3.5


FILTERS = {"bilinear": 0, "bicubic": 1, "lanczos": 2}
"""The filters by name, and the id the compiled kernels take for each."""
SUPPORT = {"bilinear": 1, "bicubic": 2, "lanczos": 3}
"""Each filter's support in input pixels at scale 1 (Pillow's ``struct filter``)."""


def taps_bound(in_extent: int, out_size: int, interpolation: str = "bilinear") -> int:
    """Pillow's kernel size for the largest possible scale ``in_extent / out_size``."""
    s = SUPPORT[interpolation]
    return 2 * max(s, -(-s * in_extent // out_size)) + 1


def _sinc(t: np.ndarray) -> np.ndarray:
    a = t * np.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(t == 0.0, 1.0, np.sin(a) / a)


def filter_weights(t: np.ndarray, interpolation: str) -> np.ndarray:
    """Pillow's ``bilinear_filter`` / ``bicubic_filter`` (a = -0.5) / ``lanczos_filter`` of
    ``t`` in float64, operation for operation (no fused multiply-adds)."""
    x = np.abs(t)
    if interpolation == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    if interpolation == "bicubic":
        a = -0.5
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
        far = (((x - 5) * x + 8) * x - 4) * a
        return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))
    inside = (-3.0 <= t) & (t < 3.0)
    return np.where(inside, _sinc(t) * _sinc(t / 3), 0.0)


def _pillow_coefficients(size: np.ndarray, scale: np.ndarray, xx: np.ndarray, taps: int,
                         interpolation: str = "bilinear") -> tuple[np.ndarray, np.ndarray]:
    """``precompute_coeffs`` (``in0 = 0``) + ``normalize_coeffs_8bpc`` for rows of ``size``
    (E, 1) input pixels at ``scale`` (E, 1), output positions ``xx`` (E, n)."""
    filterscale = np.maximum(scale, 1.0)
    support = filterscale * float(SUPPORT[interpolation])
    center = (xx + 0.5) * scale  # (E, n); in0 = 0.0 adds nothing
    ss = 1.0 / filterscale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0.0)
    xmax = np.minimum(np.trunc(center + support + 0.5), size)
    count = (xmax - xmin)[..., None]  # (E, n, 1)
    if count.size and count.max() > taps:
        raise AssertionError(f"resample tables of {taps} taps, {int(count.max())} needed")
    x = np.arange(taps, dtype=np.float64)
    t = ((x + xmin[..., None]) - center[..., None] + 0.5) * ss[..., None]
    w = np.where(x < count, filter_weights(t, interpolation), 0.0)
    ww = np.zeros(w.shape[:-1] + (1,), dtype=np.float64)
    for k in range(taps):  # Pillow sums the taps left to right
        ww = ww + w[..., k : k + 1]
    k_norm = np.where(ww != 0.0, w / np.where(ww != 0.0, ww, 1.0), w)
    scaled = k_norm * float(_SCALE)
    fixed = np.trunc(np.where(k_norm < 0, -0.5 + scaled, 0.5 + scaled))
    return xmin.astype(np.int32), fixed.astype(np.int32)


def coefficients_np(extents: np.ndarray, out_size: int, taps: int,
                    interpolation: str = "bilinear") -> tuple[np.ndarray, np.ndarray]:
    """Pillow's ``precompute_coeffs`` (``in0 = 0``) + ``normalize_coeffs_8bpc`` for crop
    extents ``extents`` (E,), in float64 on the host, operation for operation.

    Returns ``xmin`` (E, out) int32, the first input index of each output, and ``weights``
    (E, out, taps) int32 fixed point (0 past each output's own tap count).
    """
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)  # (E, 1)
    xx = np.broadcast_to(np.arange(out_size, dtype=np.float64), (size.shape[0], out_size))
    return _pillow_coefficients(size, size / out_size, xx, taps, interpolation)


def window_coefficients_np(extents: np.ndarray, fulls: int | np.ndarray, offsets: np.ndarray,
                           length: int, taps: int | None = None,
                           interpolation: str = "bilinear") -> tuple[np.ndarray, np.ndarray]:
    """Outputs ``[offset, offset + length)`` of a resize of ``extents`` (E,) pixels to
    ``fulls`` (an int or (E,)): Pillow's ``center = (X + 0.5) * scale`` for ``X = offset +
    xx``, ``xmin``/``xmax`` clipped to the whole extent — the tables of a window of a
    whole-image resize ("resize, then crop"), same layout as :func:`coefficients_np`. Outputs
    outside ``[0, full)`` (padding) get no taps: they come out 0. ``taps``: default the widest
    filter of the batch."""
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)
    full = np.broadcast_to(np.asarray(fulls, dtype=np.float64).reshape(-1, 1), size.shape)
    if taps is None:
        taps = max((taps_bound(int(e), int(f), interpolation)
                    for e, f in zip(size[:, 0], full[:, 0], strict=True)), default=1)
    off = np.asarray(offsets, dtype=np.float64).reshape(-1, 1)
    xx = off + np.arange(length, dtype=np.float64)[None, :]
    xmin, fixed = _pillow_coefficients(size, size / full, xx, taps, interpolation)
    inside = (xx >= 0) & (xx < full)
    return (np.where(inside, xmin, 0).astype(np.int32),
            np.where(inside[..., None], fixed, 0).astype(np.int32))


def window_support(extents: np.ndarray, fulls: np.ndarray, offsets: np.ndarray,
                   out_size: int, interpolation: str = "bilinear") -> np.ndarray:
    """(E, 2) int64 ``[first, last)``: the input indices the outputs ``[offset, offset +
    out_size)`` of each ``extent -> full`` resize read (Pillow's ``xmin``/``xmax``, the same
    arithmetic as :func:`window_coefficients_np`: the filter's support times the downscale
    around each output); ``first == last == 0`` when none."""
    size = np.asarray(extents, dtype=np.float64).reshape(-1, 1)
    full = np.asarray(fulls, dtype=np.float64).reshape(-1, 1)
    scale = size / full
    support = np.maximum(scale, 1.0) * float(SUPPORT[interpolation])
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


_TABLES: dict[tuple[int, str, str], tuple[int, torch.Tensor, torch.Tensor]] = {}
# (out size, filter) -> the most nonzero taps of extents 1..e (a prefix maximum): plain ints,
# which a torch.compile trace reads as constants (a numpy array there would become a tensor)
_NEEDED: dict[tuple[int, str], list[int]] = {}
_TABLES_LOCK = threading.Lock()


def _extent_cap(length: int) -> int:
    """Tables cover extents 1..cap, cap the next power of two (at least 64) >= ``length``."""
    return max(64, 1 << (max(1, length) - 1).bit_length())


def weight_tables(out_size: int, length: int, device: torch.device,
                  interpolation: str = "bilinear") -> tuple[torch.Tensor, torch.Tensor]:
    """``(xmin (E, out) int32, weights (E, out, taps) int32)`` on ``device`` for every crop
    extent ``1..E`` with ``E >= length`` (row ``e - 1`` is extent ``e``): built on the host
    once per output size, filter and device (again only when a longer axis comes)."""
    key = (out_size, str(device), interpolation)
    need_key = (out_size, interpolation)
    cap = _extent_cap(length)
    got = _TABLES.get(key)
    if got is None or got[0] < cap:
        if compiling():
            raise RuntimeError(f"the resize tables for {out_size} outputs on {device} are made on "
                            "first use, not inside a torch.compile trace: run the transform "
                            "once eagerly first (at the largest image size)")
        with _TABLES_LOCK:
            got = _TABLES.get(key)
            if got is None or got[0] < cap:
                xmin, w = _all_extents(cap, out_size, interpolation)
                nz = np.where((w != 0).any(1), np.arange(1, w.shape[-1] + 1), 0)  # (E, T)
                if len(_NEEDED.get(need_key, ())) < cap:
                    _NEEDED[need_key] = [int(v) for v in np.maximum.accumulate(nz.max(1))]
                got = (cap, to_device(torch.from_numpy(xmin), device),
                       to_device(torch.from_numpy(w), device))
                _TABLES[key] = got
    return got[1], got[2]


def _all_extents(cap: int, out_size: int, interpolation: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`coefficients_np` of extents ``1..cap``, in slices of extents: the float64
    work arrays stay near 64 MiB whatever the size (Lanczos' 2048 -> 1024 has 25 taps)."""
    taps = taps_bound(cap, out_size, interpolation)
    step = max(1, (64 << 20) // (out_size * taps * 8 * 4))
    parts = [coefficients_np(np.arange(e0, min(e0 + step, cap + 1)), out_size, taps,
                             interpolation) for e0 in range(1, cap + 1, step)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def taps_needed(length: int, out_size: int, interpolation: str = "bilinear") -> int:
    """The most nonzero taps any extent ``1..length`` has for ``out_size`` outputs (Pillow's
    kernel size counts a tap more than the filter can reach): from the host tables."""
    need = _NEEDED.get((out_size, interpolation))
    if need is None or len(need) < length:
        weight_tables(out_size, length, torch.device("cpu"), interpolation)
        need = _NEEDED[(out_size, interpolation)]
    return max(1, int(need[max(1, length) - 1]))


def extent_tables(extents: torch.Tensor, out_size: int, length: int,
                  interpolation: str = "bilinear") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample ``(xmin (B, out), weights (B, out, T))`` for ``extents`` (B,) in 1..length,
    gathered from :func:`weight_tables` on the extents' own device (T = the bound for
    ``length``)."""
    table_x, table_w = weight_tables(out_size, length, extents.device, interpolation)
    taps = min(taps_bound(length, out_size, interpolation), table_w.shape[-1])
    row = extents.to(torch.int64).clamp(1, length) - 1
    return table_x.index_select(0, row), table_w.index_select(0, row)[..., :taps]


@dataclass(frozen=True)
class Axis:
    """One axis of every sample's source region and its resampling tables: region
    ``[start, start + extent)`` (B,), ``xmin`` (B, n) the first tap of each output relative to
    ``start``, ``weights`` (B, n, T) int32 (zero past each output's own taps). All on one
    device (the host, or the images' device)."""

    start: torch.Tensor
    extent: torch.Tensor
    xmin: torch.Tensor
    weights: torch.Tensor

    def flipped(self, flip: torch.Tensor) -> Axis:
        """The outputs in reverse order where ``flip`` (B,) is set (a mirrored result)."""
        n = self.xmin.shape[1]
        pos = torch.arange(n, device=self.xmin.device)
        src = torch.where(flip.to(self.xmin.device).view(-1, 1), n - 1 - pos, pos)  # (B, n)
        w_src = src.unsqueeze(-1).expand(-1, -1, self.weights.shape[-1])
        return Axis(self.start, self.extent, torch.gather(self.xmin, 1, src),
                    torch.gather(self.weights, 1, w_src))


def window_axis(starts: np.ndarray, extents: np.ndarray, fulls: np.ndarray,
                offsets: np.ndarray, length: int, size: int,
                interpolation: str = "bilinear") -> Axis:
    """Host tables of one axis of windows of whole resizes: each region ``[start, start +
    extent)`` resized to ``full``, outputs ``[offset, offset + length)`` kept. The axis read is
    only what those outputs touch (:func:`window_support`, inside ``[0, size)``: a region may
    reach past the image where its window does not read), so its start and ``xmin`` shift."""
    xmin, weights = window_coefficients_np(extents, fulls, offsets, length,
                                           interpolation=interpolation)
    support = window_support(extents, fulls, offsets, length, interpolation)
    first = support[:, 0]
    start = np.clip(np.asarray(starts, dtype=np.int64) + first, 0, size - 1)
    extent = np.clip(support[:, 1] - first, 1, size - start)
    rel = np.maximum(xmin.astype(np.int64) - first[:, None], 0)
    return Axis(torch.from_numpy(start), torch.from_numpy(extent),
                torch.from_numpy(rel.astype(np.int32)), torch.from_numpy(weights))


# --- planning: shapes, tap windows and memory ----------------------------------------------
@dataclass(frozen=True)
class PassPlan:
    """How one pass runs: ``chunks`` batch slices, each ``per_tap`` (an ``addcmul_`` per tap)
    or with every tap at once."""

    chunks: int
    per_tap: bool

    def ops(self, taps: int) -> int:
        return self.chunks * ((2 * taps + 2) if self.per_tap else 5)


def plan_pass(batch: int, out_elems: int, taps: int, src: int, dest: int, budget: int
              ) -> PassPlan:
    """The plan with the fewest device ops whose peak bytes stay within ``budget`` for a pass
    producing ``out_elems`` int32 sums per sample (one uint8 per sum gathered per tap) from a
    ``src`` of rows into a ``dest`` (bytes of the whole batch); when none fits, the smallest.
    One chunk frees ``src`` before ``dest`` is written; several need both. The number of
    chunks follows from per-sample bytes, so any batch size gets the same plan (chunks of
    near-equal size, the largest at most one sample over its share)."""
    per = max(batch, 1)
    best: tuple[int, float, PassPlan] | None = None
    smallest: tuple[float, PassPlan] | None = None
    for per_tap in (True, False):
        work = out_elems * (5 if per_tap else max(5 * taps, 4 * taps + 4))  # one sample
        one = max(src + batch * work, 4 * batch * out_elems + dest)
        if one <= budget:
            chunks = 1
        else:
            room = (budget - src - dest) / per  # per sample, with both src and dest live
            chunks = batch if room <= 0 else min(batch, max(2, math.ceil(work / room)))
        plan = PassPlan(chunks, per_tap)
        peak = one if chunks == 1 else src + dest + -(-batch // chunks) * work
        if smallest is None or peak < smallest[0]:
            smallest = (peak, plan)
        if peak <= budget * 1.15:  # one sample over an even share
            cand = (plan.ops(taps), peak, plan)
            if best is None or cand[:2] < best[:2]:
                best = cand
    assert smallest is not None
    return best[2] if best is not None else smallest[1]


def _windows(axis_xmin: torch.Tensor, weights: torch.Tensor, length: int, taps: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each output's window of ``taps`` rows inside ``[0, length)`` and its weights: the
    window starts at ``xmin`` unless that runs past the end, then the weights shift right."""
    hi = max(length - taps, 0)
    start = axis_xmin.to(torch.int64).clamp(0, hi)
    shift = axis_xmin.to(torch.int64) - start  # >= 0
    k = torch.arange(taps, device=weights.device).view(1, 1, -1) - shift.unsqueeze(-1)
    have = weights.shape[-1]
    ok = (k >= 0) & (k < have)
    w = torch.gather(weights, 2, k.clamp(0, have - 1))
    return start, torch.where(ok, w, torch.zeros((), dtype=w.dtype, device=w.device))


def _max_taps(weights: torch.Tensor) -> int:
    """The last tap with a nonzero weight + 1, read on the host."""
    nz = (weights != 0).reshape(-1, weights.shape[-1]).any(0)
    idx = torch.nonzero(nz)
    return int(idx[-1, 0]) + 1 if idx.numel() else 1


# --- the device passes ---------------------------------------------------------------------
_CONST: dict[str, torch.Tensor] = {}


def _halves(device: torch.device, taps: int) -> torch.Tensor:
    """(taps, 1) int32 ``[2**21, 0, 0, ...]``: Pillow's rounding half, added once per sum."""
    key = str(device)
    got = _CONST.get(key)
    if got is None or got.shape[0] < taps:
        host = torch.zeros(max(taps, 64), 1, dtype=torch.int32)
        host[0, 0] = _HALF
        got = to_device(host, device)
        _CONST[key] = got
    return got[:taps]


def _run_pass(source: list[torch.Tensor], start: torch.Tensor, weights: torch.Tensor,
              plan: PassPlan, make_dest: Callable[[], torch.Tensor], clip: bool = False
              ) -> torch.Tensor:
    """Resample: output ``o`` of sample ``b`` is ``sum_k weights[b, o, k] * rows[start[b, o] +
    k]`` (``source[0]`` the rows (N, R) uint8, dropped from ``source`` as soon as no chunk
    needs it; ``start`` (B, n) row ids, or (B, n, T) every tap's row when all taps run at once;
    ``weights`` (B, n, T) int32), rounded to 8 bits into ``make_dest()`` (B, n, ...): returned.
    ``clip``: clip to 0..255 first (filters with negative lobes; Pillow's ``clip8``)."""
    rows = source.pop()
    b, n, taps = weights.shape
    width = rows.shape[1]
    halves = _halves(rows.device, taps)
    cuts = [b * i // plan.chunks for i in range(plan.chunks + 1)]  # near-equal chunks
    dest: torch.Tensor | None = None
    for b0, b1 in zip(cuts[:-1], cuts[1:], strict=True):
        m = b1 - b0
        w = weights[b0:b1]
        ids = start[b0:b1].reshape(-1)
        if plan.per_tap:
            acc = torch.addcmul(halves[0, 0], rows.index_select(0, ids).view(m, n, width),
                                w[:, :, 0:1])
            for k in range(1, taps):  # row ``id + k``: the same ids into rows shifted by k
                acc.addcmul_(rows[k:].index_select(0, ids).view(m, n, width), w[:, :, k : k + 1])
        else:
            gathered = rows.index_select(0, ids).view(m, n, taps, width)
            acc = torch.addcmul(halves, gathered, w.unsqueeze(-1)).sum(2, dtype=torch.int32)
            del gathered
        if b1 == b:
            del rows  # the last chunk: the source may go before the result is written
        if dest is None:
            dest = make_dest()
        if clip:  # Pillow's clip8 of ``acc >> 22``, before the shift
            acc.clamp_(0, 255 * _SCALE)
        acc.bitwise_and_(_KEEP)  # exact: ``>> 22`` without a shift (Ascend: AICPU)
        part = dest[b0:b1]
        if compiling() and not part.is_contiguous():  # dynamo takes no strided ``out=``
            part.copy_(torch.div(acc.view(part.shape), _SCALE, rounding_mode="trunc"))
        else:
            torch.div(acc.view(part.shape), _SCALE, rounding_mode="trunc", out=part)
    assert dest is not None
    return dest


@dataclass(frozen=True)
class Bounds:
    """What any batch of a kind can need, from shapes alone: the longest first-pass and
    second-pass axes and their tap counts. Plans made from bounds are the same for every
    batch (the same device ops); the tables may need less."""

    first: int
    second: int
    taps1: int
    taps2: int


def resample_batch(x: torch.Tensor, rows: Axis, cols: Axis, vertical: torch.Tensor,
                   bounds: Bounds | None = None, clip: bool = False) -> torch.Tensor:
    """Resize each sample's region of ``x`` (B, H, W, C) uint8 (contiguous, channels last):
    ``rows`` the height axis, ``cols`` the width axis, ``vertical`` (B,) bool the samples whose
    first pass is vertical (Pillow's order). Tables may live on the host or on ``x``'s device.
    ``bounds``: plan the passes (memory, tap loops) for any batch of these shapes, not just
    this one. ``clip``: weights may be negative (bicubic, Lanczos): clip each pass to 0..255.
    Returns (B, rows out, cols out, C) uint8, contiguous."""
    bsz, height, width, chans = x.shape
    dev = x.device
    m_h, m_w = rows.xmin.shape[1], cols.xmin.shape[1]
    m = max(m_h, m_w)
    tdev = rows.xmin.device
    vert = vertical.to(tdev).to(torch.bool)
    known = (host_values(rows.xmin) and host_values(vertical) and not compiling()
             and vert.numel() > 0)

    def padded(a: Axis) -> tuple[torch.Tensor, torch.Tensor]:
        n, t = a.xmin.shape[1], a.weights.shape[-1]
        tt = max(rows.weights.shape[-1], cols.weights.shape[-1])
        xmin = torch.nn.functional.pad(a.xmin, (0, m - n))
        w = torch.nn.functional.pad(a.weights, (0, tt - t, 0, m - n))
        return xmin, w

    rx, rw = padded(rows)
    cx, cw = padded(cols)
    v1 = vert.view(-1, 1)
    first = (torch.where(vert, rows.start, cols.start), torch.where(vert, rows.extent, cols.extent),
             torch.where(v1, rx, cx), torch.where(v1.unsqueeze(-1), rw, cw))
    second = (torch.where(vert, cols.start, rows.start), torch.where(vert, cols.extent, rows.extent),
              torch.where(v1, cx, rx), torch.where(v1.unsqueeze(-1), cw, rw))
    if known:  # the batch's own extents: a tighter canvas
        len1, len2 = int(first[1].max()), int(second[1].max())
    else:  # from the shapes alone
        len1 = len2 = max(height, width) if vert.numel() else 1
    if bounds is not None:
        taps1, taps2 = bounds.taps1, bounds.taps2
        plan_len1, plan_len2 = max(len1, bounds.first), max(len2, bounds.second)
    elif known:
        taps1, taps2 = _max_taps(first[3]), _max_taps(second[3])
        plan_len1, plan_len2 = len1, len2
    else:
        taps1, taps2 = first[3].shape[-1], second[3].shape[-1]
        plan_len1, plan_len2 = len1, len2
    taps1 = max(1, min(taps1, len1, first[3].shape[-1]))
    taps2 = max(1, min(taps2, len2, second[3].shape[-1]))

    # canvas: pixel (i, j) of sample b's frame, i along its first axis, j along the other
    idx64 = bsz * height * width >= 2**31
    itype = torch.int64 if idx64 else torch.int32
    base = torch.arange(bsz, device=tdev, dtype=torch.int64) * (height * width)
    step1 = torch.where(vert, width, 1).to(torch.int64)  # first axis: h (row) or w
    step2 = torch.where(vert, 1, width).to(torch.int64)
    i = torch.arange(len1, device=tdev).view(1, -1)
    j = torch.arange(len2, device=tdev).view(1, -1)
    last1 = (first[1].to(torch.int64) - 1).view(-1, 1)
    last2 = (second[1].to(torch.int64) - 1).view(-1, 1)
    p0 = base.view(-1, 1) + (first[0].view(-1, 1) + torch.minimum(i, last1)) * step1.view(-1, 1)
    q0 = (second[0].view(-1, 1) + torch.minimum(j, last2)) * step2.view(-1, 1)

    s1, w1 = _windows(first[2], first[3], len1, taps1)
    s2, w2 = _windows(second[2], second[3], len2, taps2)
    s1 = s1 + torch.arange(bsz, device=tdev).view(-1, 1) * len1
    s2 = s2 + torch.arange(bsz, device=tdev).view(-1, 1) * len2

    out_elems1 = m * plan_len2 * chans
    out_elems2 = m * m * chans
    budget = int(MEMORY_BUDGET * x.numel() * x.element_size())
    canvas_bytes = bsz * plan_len1 * plan_len2 * chans
    mid_bytes = bsz * plan_len2 * m * chans
    out_bytes = bsz * out_elems2
    plan1 = plan_pass(bsz, out_elems1, taps1, canvas_bytes, mid_bytes, budget)
    plan2 = plan_pass(bsz, out_elems2, taps2, mid_bytes, out_bytes, budget - out_bytes)
    if not plan1.per_tap:
        s1 = s1.unsqueeze(-1) + torch.arange(taps1, device=tdev)
    if not plan2.per_tap:
        s2 = s2.unsqueeze(-1) + torch.arange(taps2, device=tdev)

    # every host-made table in one copy to the device
    ints = [p0.reshape(-1), q0.reshape(-1), s1.reshape(-1), s2.reshape(-1)]
    sizes = [t.numel() for t in ints]
    pack = torch.cat([t.to(itype) for t in ints] + [w1.reshape(-1).to(itype),
                                                   w2.reshape(-1).to(itype)])
    horizontal = ~vert  # the samples whose frame is the image's (host values: no device op)
    with riding({"resample.horizontal": horizontal}):  # and what rides (``_kernels.riding``)
        pack = upload(pack, dev)
        hflag = take("resample.horizontal", horizontal, dev)
    parts = list(torch.split(pack, sizes + [w1.numel(), w2.numel()]))
    p0d, q0d = parts[0].view(bsz, len1, 1), parts[1].view(bsz, 1, len2)
    s1d, s2d = parts[2].view(s1.shape), parts[3].view(s2.shape)
    w1d = parts[4].view(w1.shape).to(torch.int32) if idx64 else parts[4].view(w1.shape)
    w2d = parts[5].view(w2.shape).to(torch.int32) if idx64 else parts[5].view(w2.shape)
    del pack, parts

    pixels = x.reshape(bsz * height * width, chans)
    canvas = [pixels.index_select(0, (p0d + q0d).view(-1)).view(bsz * len1, len2 * chans)]
    mid = _run_pass(canvas, s1d, w1d, plan1, lambda: torch.empty(
        (bsz, len2, m, chans), dtype=torch.uint8, device=dev).permute(0, 2, 1, 3), clip)
    source = [mid.permute(0, 2, 1, 3).view(bsz * len2, m * chans)]
    del mid
    z = _run_pass(source, s2d, w2d, plan2, lambda: torch.empty(
        (bsz, m, m, chans), dtype=torch.uint8, device=dev), clip)
    # a sample whose first pass was vertical has its frame transposed: (w, h) -> (h, w); the
    # contiguous ``z`` first, so the result takes its (contiguous) layout without an ``out=``
    out = torch.where(hflag.view(-1, 1, 1, 1), z, z.transpose(1, 2))
    del z
    if m_h != m or m_w != m:
        out = out[:, :m_h, :m_w].contiguous()
    return out


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

__all__ = ["FILTERS", "MEMORY_BUDGET", "PRECISION_BITS", "SUPPORT", "Axis", "Bounds", "PassPlan",
           "coefficients_np", "extent_tables", "filter_weights", "plan_pass", "resample_batch", "taps_bound", "taps_needed",
           "vertical_first_rule",
           "weight_tables", "window_coefficients_np"]
