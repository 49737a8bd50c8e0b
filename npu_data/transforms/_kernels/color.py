"""Pillow-exact colour kernels on uint8 batches (B, 3, H, W).

Pillow's ImageEnhance ops blend two 8-bit images in float32 as ``in1 + a * (in2 - in1)``
and then clip and TRUNCATE; grayscale is ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16`` in
integers. Hue follows Pillow's ``rgb2hsv`` / ``hsv2rgb``, whose arithmetic mixes float and
double: :func:`rgb_to_hsv` / :func:`hsv_to_rgb` compute each step in float64 and round to
float32 where Pillow assigns to a float variable — on the host, to build the two tables the
device kernels gather from (:func:`adjust_hue_lut`); nothing on the device path uses float64.
Every op is elementwise over the whole batch; factors are (B,).
"""

from __future__ import annotations

import torch

from npu_data.transforms._kernels import to_device


def _f(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values to float32 precision (a C ``float`` assignment), kept as float64."""
    return x.to(torch.float32).to(torch.float64)


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("L")`` per pixel: (B, 1, H, W) int32."""
    x = images.to(torch.int32)
    return (x[:, 0:1] * 19595 + x[:, 1:2] * 38470 + x[:, 2:3] * 7471 + 0x8000) >> 16


def blend(in1: torch.Tensor, in2: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Pillow's ``Image.blend``: float32 ``in1 + alpha * (in2 - in1)``, clipped, truncated."""
    a = alpha.to(torch.float32).view(-1, 1, 1, 1)
    t = in1.to(torch.float32) + a * (in2.to(torch.float32) - in1.to(torch.float32))
    return t.clamp_(0.0, 255.0).to(torch.uint8)


def valid_mask(sizes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(B, 1, H, W) bool: True inside each sample's valid (height, width)."""
    rows = torch.arange(height, device=sizes.device).view(1, 1, height, 1)
    cols = torch.arange(width, device=sizes.device).view(1, 1, 1, width)
    return (rows < sizes[:, 0].view(-1, 1, 1, 1)) & (cols < sizes[:, 1].view(-1, 1, 1, 1))


def gray_mean(gray: torch.Tensor, sizes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``int(mean(L) + 0.5)`` of ``gray`` (B, 1, H, W) over ``mask``, exactly, as (B,) int32."""
    total = torch.where(mask, gray, 0).to(torch.int64).sum(dim=(1, 2, 3))
    n = (sizes[:, 0].to(torch.int64) * sizes[:, 1].to(torch.int64)).clamp(min=1)
    return torch.div(2 * total + n, 2 * n, rounding_mode="floor").to(torch.int32)


def contrast_mean(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``int(mean(L) + 0.5)`` over each sample's valid region, exactly, as (B,) int32."""
    mask = valid_mask(sizes, images.shape[-2], images.shape[-1])
    return gray_mean(grayscale(images), sizes, mask)


def mask_padding(out: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``out`` with 0 outside each sample's valid region."""
    mask = valid_mask(sizes, out.shape[-2], out.shape[-1])
    return torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))


# --- the torch implementations of functional's colour ops (factors (B,) on the device) ------
def adjust_brightness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    """Blend with black."""
    return blend(torch.zeros_like(images), images, factors)


def adjust_contrast(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                    ) -> torch.Tensor:
    """Blend with the grey mean of the valid region; the padding comes out 0."""
    s = to_device(sizes, images.device)
    mean = contrast_mean(images, s).view(-1, 1, 1, 1)
    return mask_padding(blend(mean.expand_as(images), images, factors), s)


def adjust_saturation(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    """Blend with each pixel's grey."""
    return blend(grayscale(images).expand_as(images), images, factors)


def adjust_hue(images: torch.Tensor, sizes: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Hue shifted by ``shifts (B,)`` levels through the two tables."""
    return adjust_hue_lut(images, shifts)


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


# --- lookup tables: hue through two 2**24-entry tables (exactly the functions above) -------
_LUT_VERSION = 1
_LUTS: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def _pack(x: torch.Tensor) -> torch.Tensor:
    """(3, N) 0..255 -> (N,) int32 ``a << 16 | b << 8 | c``."""
    x = x.to(torch.int32)
    return (x[0] << 16) | (x[1] << 8) | x[2]


def _build_lut(fn: object) -> torch.Tensor:
    codes = torch.arange(1 << 24, dtype=torch.int32)
    parts = []
    for chunk in codes.split(1 << 21):
        trip = torch.stack([(chunk >> 16) & 255, (chunk >> 8) & 255, chunk & 255])
        parts.append(_pack(fn(trip.to(torch.uint8).view(1, 3, 1, -1)).view(3, -1)))  # type: ignore[operator]
    return torch.cat(parts)


def _cache_path() -> str:
    from npu_data.common.cache import cache_root

    return str(cache_root(f"hsv-luts-v{_LUT_VERSION}.npy"))


def hsv_luts(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rgb->hsv, hsv->rgb) tables on ``device``: built once (about 15 s on one core) and
    cached as a plain ``.npy`` file under ``common.cache.cache_root()``."""
    key = str(device)
    if key in _LUTS:
        return _LUTS[key]
    import numpy as np

    from npu_data.common.atomic import atomic_save_npy

    path = _cache_path()
    table: np.ndarray | None = None
    try:
        loaded = np.load(path, mmap_mode="r", allow_pickle=False)
        if loaded.shape == (2, 1 << 24) and loaded.dtype == np.int32:
            table = np.array(loaded)
    except (OSError, ValueError):
        table = None
    if table is None:
        table = torch.stack([_build_lut(rgb_to_hsv), _build_lut(hsv_to_rgb)]).numpy()
        try:
            atomic_save_npy(path, table)
        except OSError:
            pass  # a read-only cache only costs the rebuild next time
    t = to_device(torch.from_numpy(np.ascontiguousarray(table)), device)
    _LUTS[key] = (t[0], t[1])
    return _LUTS[key]


def adjust_hue_lut(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Hue shift by ``shift (B,)`` levels through the tables: same values as the direct path."""
    to_hsv, to_rgb = hsv_luts(images.device)
    x = images.to(torch.int32)
    # products, not ``<<``: CANN runs LeftShift as an AICPU task (docs/device-ops.md)
    code = (x[:, 0] * 65536) | (x[:, 1] * 256) | x[:, 2]  # (B, H, W)
    hsv = to_hsv[code.reshape(-1).long()].view_as(code)
    h = ((hsv >> 16) + shift.view(-1, 1, 1).to(torch.int32)) & 255
    rgb = to_rgb[((h * 65536) | (hsv & 0xFFFF)).reshape(-1).long()].view_as(code)
    out = torch.stack([(rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255], dim=1)
    return out.to(torch.uint8)
