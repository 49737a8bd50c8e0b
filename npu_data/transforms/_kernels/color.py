"""Pillow-exact colour kernels on uint8 batches, as few device ops per step.

Pillow's ImageEnhance ops blend two 8-bit images in float32 as ``in1 + a * (in2 - in1)``, then
clip and truncate; every one of them is ``trunc(clamp(key + a * (value - key)))`` with key 0
(brightness), the grey mean (contrast) or the pixel's grey (saturation). So a sample's three
factors make one (514, 256) int32 table (:func:`blend_tables`, rows in ``_kernels.tables``)
and a blend step of any op for any sample is one gather (:func:`blend_step`). The products
``a * d`` are made exactly as Pillow rounds them and added to the key separately, in a form
that a compiler's ``a * b + c`` contraction into FMA cannot change (:func:`products`).

Hue (:func:`hue_step`) is two gathers: ``(H, max - min, max)`` packed by (R, G, B), then RGB
by ``(H + shift, max - min, max)`` (tables from Pillow itself; ``tests/transforms/
test_hue_tables.py`` checks all 2**24 colours). :func:`rgb_to_hsv` / :func:`hsv_to_rgb`
evaluate Pillow's float/double arithmetic directly (float64: a host reference only).

Images in the steps are (B, H, W, 3) int32 (channels last); no float64, no shifts, int32 sums.
"""

from __future__ import annotations

import torch

from npu_data.transforms._kernels.tables import PRODUCTS, ColorTables


def _f(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values to float32 precision (a C ``float`` assignment), kept as float64."""
    return x.to(torch.float32).to(torch.float64)


# --- blends: brightness, contrast, saturation ----------------------------------------------
def products(factors: torch.Tensor) -> torch.Tensor:
    """(B, 4, 511) float32 ``fl(a * d)`` for d = -255..255 and a = contrast, saturation,
    brightness factor (``factors`` (B, 3): brightness, contrast, saturation) and 1.

    Each factor is split as ``hi + lo`` with ``hi`` its bfloat16 rounding (8 significant bits)
    and ``lo`` the rest (at most 16): ``hi * d`` and ``lo * d`` are exact in float32, so
    their rounded sum is the rounded product ``fl(a * d)``, whether or not a compiler fuses
    one of the multiplications with the addition (the other product is exact either way).
    """
    f = factors.to(torch.float32)
    a = torch.stack([f[:, 1], f[:, 2], f[:, 0], torch.ones_like(f[:, 0])], 1)  # (B, 4)
    hi = a.to(torch.bfloat16).to(torch.float32)
    lo = a - hi
    d = torch.arange(-255, 256, dtype=torch.float32, device=f.device)
    return hi.unsqueeze(-1) * d + lo.unsqueeze(-1) * d


def blend_tables(prods: torch.Tensor, tables: ColorTables, dtype: torch.dtype = torch.uint8
                 ) -> torch.Tensor:
    """(B, 514, 256) uint8 (or int32: the same levels, ready to index the next step):
    every sample's blend of each row's key with each value,
    ``trunc(clamp(key + fl(a * (value - key)), 0, 255))`` in float32, from ``prods``
    (:func:`products`, on the tables' device). One gather and an addition: no product here
    for a compiler to contract."""
    b = prods.shape[0]
    flat = prods.reshape(b, PRODUCTS * 511)
    return flat[:, tables.blend_src].add_(tables.blend_key).clamp_(0.0, 255.0).to(dtype)


def blend_step(x: torch.Tensor, blend: torch.Tensor, sample: torch.Tensor, key_sel: torch.Tensor,
               tables: ColorTables, valid: torch.Tensor | None = None, wide: bool = False,
               grey: bool = True, mean: bool = True) -> torch.Tensor:
    """One blend per sample: ``x`` (B, H, W, 3) int32 -> the table's dtype, each sample through row
    ``key`` of its ``blend`` table (``sample`` (B, 1, 1, 1) its table index); ``valid``
    (B, H, W) bool the pixels a contrast mean counts (None: all).

    ``key_sel`` (4, B) int32 (N, M, D, S) picks the key: ``floor((M * t + N) / D) + S * grey``
    with ``t`` the sample's grey sum: contrast (N, M, D, S) = (n, 2, 2n, 0) (Pillow's
    ``int(mean + 0.5)`` over ``n`` valid pixels), saturation (256, 0, 1, 1), brightness
    (512, 0, 1, 0), nothing (513, 0, 1, 0). ``wide``: sums in int64 (images of 2**22 pixels
    or more, where ``2 t + n`` passes int32). Without contrast in the batch (``mean``) or
    saturation too (``grey``) the key needs fewer ops.
    """
    b = x.shape[0]
    n, m, d, s = key_sel.unbind(0)
    if not grey and not mean:  # brightness or nothing: the key is N
        return blend[sample, n.view(b, 1, 1, 1), x]
    lum = tables.grey[x[..., 0], x[..., 1], x[..., 2]]  # (B, H, W) uint8
    if not mean:
        kc = n
    else:
        counted = lum if valid is None else torch.where(valid, lum, torch.zeros(
            (), dtype=lum.dtype, device=lum.device))
        if wide:
            t = counted.sum((1, 2), dtype=torch.int64)
            kc = torch.div(torch.addcmul(n.to(torch.int64), t, m.to(torch.int64)),
                           d.to(torch.int64), rounding_mode="floor").to(torch.int32)
        else:
            t = counted.sum((1, 2), dtype=torch.int32)
            kc = torch.div(torch.addcmul(n, t, m), d, rounding_mode="floor")
        del counted
    key = torch.addcmul(kc.view(b, 1, 1), lum, s.view(b, 1, 1))
    del lum
    return blend[sample, key.unsqueeze(-1), x]


# --- hue -----------------------------------------------------------------------------------
def hue_step(x: torch.Tensor, shift: torch.Tensor, tables: ColorTables,
             active: torch.Tensor | None = None) -> torch.Tensor:
    """Pillow's hue shift by ``shift`` (B,) levels of ``x`` (B, H, W, 3) int32: uint8 out, or
    int32 where ``active`` (B,) bool picks the shifted samples (the others keep ``x``).
    Four ops: ``(H, max - min, max)`` of each pixel from ``hue_rgb``, ``H + shift`` (modulo
    256: the packed value modulo ``2**24``), RGB from ``hue_out`` at that packed value."""
    b = x.shape[0]
    packed = tables.hue_rgb[x[..., 0], x[..., 1], x[..., 2]]  # (B, H, W) int32
    packed = torch.add(packed, shift.view(b, 1, 1), alpha=1 << 16).bitwise_and_(0xFFFFFF)
    out = tables.hue_out[packed]  # (B, H, W, 3) uint8
    del packed
    if active is None:
        return out
    return torch.where(active.view(b, 1, 1, 1), out, x)


def adjust_hue_direct(images: torch.Tensor, sizes: torch.Tensor, shifts: torch.Tensor
                      ) -> torch.Tensor:
    """Hue through Pillow's per-pixel arithmetic (float64: a host reference only)."""
    hsv = rgb_to_hsv(images)
    h = torch.remainder(hsv[:, 0].to(torch.int64) + shifts.view(-1, 1, 1), 256)
    return hsv_to_rgb(torch.stack([h.to(torch.uint8), hsv[:, 1], hsv[:, 2]], dim=1))


def rgb_to_hsv(images: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("HSV")``: (B, 3, H, W) uint8 H, S, V."""
    x = images.to(torch.int32)
    r, g, b = x[:, 0], x[:, 1], x[:, 2]
    maxc = torch.maximum(r, torch.maximum(g, b))
    minc = torch.minimum(r, torch.minimum(g, b))
    gray = maxc == minc
    cr = (maxc - minc).to(torch.float32)
    safe_cr = torch.where(gray, torch.ones_like(cr), cr)
    s = cr / maxc.to(torch.float32).clamp(min=1.0)
    rc = _f(((maxc - r).to(torch.float32) / safe_cr).to(torch.float64))
    gc = _f(((maxc - g).to(torch.float32) / safe_cr).to(torch.float64))
    bc = _f(((maxc - b).to(torch.float32) / safe_cr).to(torch.float64))
    h = torch.where(
        r == maxc, _f(bc - gc),
        torch.where(g == maxc, _f(2.0 + rc - bc), _f(4.0 + gc - rc)),
    )
    h = _f(torch.fmod(h / 6.0 + 1.0, 1.0))
    uh = torch.trunc(h * 255.0).clamp(0, 255)
    us = torch.trunc(s.to(torch.float64) * 255.0).clamp(0, 255)
    uh = torch.where(gray, torch.zeros_like(uh), uh)
    us = torch.where(gray, torch.zeros_like(us), us)
    return torch.stack([uh.to(torch.uint8), us.to(torch.uint8), maxc.to(torch.uint8)], dim=1)


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5))


def hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """Pillow's HSV to RGB conversion: (B, 3, H, W) uint8."""
    h = hsv[:, 0].to(torch.float64)
    s = hsv[:, 1].to(torch.float64)
    v = hsv[:, 2].to(torch.float64)
    hf = h * 6.0 / 255.0
    i = torch.floor(hf)
    f = _f(hf - i)
    fs = _f(s / 255.0)
    p = _round_half_away(v * (1.0 - fs)).clamp(0, 255)
    q = _round_half_away(v * (1.0 - _f(fs * f))).clamp(0, 255)
    t = _round_half_away(v * (1.0 - fs * (1.0 - f))).clamp(0, 255)
    sector = (i.to(torch.int64) % 6).unsqueeze(1)  # (B, 1, H, W)
    vv, pp, qq, tt = (c.unsqueeze(1) for c in (v, p, q, t))
    # (r, g, b) per sector 0..5, as in Pillow's switch
    table_r = torch.stack([vv, qq, pp, pp, tt, vv], dim=0)
    table_g = torch.stack([tt, vv, vv, qq, pp, pp], dim=0)
    table_b = torch.stack([pp, pp, tt, vv, vv, qq], dim=0)
    idx = sector.unsqueeze(0)
    r = torch.gather(table_r, 0, idx).squeeze(0)
    g = torch.gather(table_g, 0, idx).squeeze(0)
    b = torch.gather(table_b, 0, idx).squeeze(0)
    rgb = torch.cat([r, g, b], dim=1)
    grey = (hsv[:, 1:2] == 0)
    rgb = torch.where(grey, v.unsqueeze(1), rgb)
    return rgb.to(torch.uint8)


def hue_shift(hue_factors: torch.Tensor) -> torch.Tensor:
    """torchvision's ``np.array(hue * 255).astype(np.uint8)`` as (B,) int32 in 0..255.

    ``trunc(h * 255)`` of a float32 ``h`` (|h| <= 0.5), exactly, in float32: with
    ``a = |h|``, ``a * 255 = a * 256 - a`` where ``a * 256`` and its fractional part ``f`` are
    exact, so the result is ``floor(a * 256) + floor(f - a)``; ``f - a`` lies in [-0.5, 1)
    and a correctly rounded subtraction keeps its sign and stays below 1 (it cannot exceed
    ``f``), so its floor is exact. Negative factors wrap modulo 256 as numpy's cast does.
    """
    h = hue_factors.to(torch.float32)
    a = h.abs()
    scaled = a * 256.0
    whole = torch.floor(scaled)
    levels = (whole + torch.floor((scaled - whole) - a)).to(torch.int32)
    return torch.remainder(torch.where(h < 0, -levels, levels), 256)
