"""The torch pixel-augmentation kernels: grayscale, erasing, the per-level ops and sharpness.

Every op whose output level depends on the input level alone (posterize, solarize, invert,
equalize, autocontrast, brightness, contrast) is a per-sample, per-channel lookup table
``(B, 3, 256)`` applied by one gather (:func:`apply_luts`); the tables are made on the device
from each sample's parameters and histograms (:func:`histograms`: a ``scatter_add`` into fixed
bins, so no data-dependent shape). Pillow's integer arithmetic is integer here; its float32
blends are reproduced with products that are exact whatever a compiler fuses
(:func:`blend_products`). Images are ``(B, 3, H, W)`` uint8; the padding outside ``sizes``
comes out 0.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from npu_data.transforms._kernels import (
    DeviceTables,
    compiling,
    host_values,
    on_host,
    riding,
    take,
    to_device,
)
from npu_data.transforms._kernels.jitter import _valid
from npu_data.transforms._kernels.tables import grey_table

# the op ids of ``policy_step`` (torchvision's auto-augment op names)
POLICY_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
              "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
              "AutoContrast", "Equalize", "Invert")
GEOMETRIC_OPS = frozenset(range(1, 6))
_OP = {name: i for i, name in enumerate(POLICY_OPS)}
# the lookup-table ops of a policy step, in the order of ``_lut_candidates``
_LUT_OPS = ("Identity", "Brightness", "Contrast", "Posterize", "Solarize", "AutoContrast",
            "Equalize", "Invert")
# each policy op's row among the tables (the identity's for Color, Sharpness, geometric ops)
_LUT_OF_OP = torch.tensor([_LUT_OPS.index(n) if n in _LUT_OPS else 0 for n in POLICY_OPS])


def valid_mask(sizes: torch.Tensor, height: int, width: int, device: torch.device
               ) -> torch.Tensor:
    """(B, 1, H, W) bool: the pixels inside each sample's valid size."""
    return _valid(sizes, height, width, device)[0].unsqueeze(1)


def grey(x: torch.Tensor) -> torch.Tensor:
    """Pillow's ``L`` of (B, 3, H, W) int32 levels: (B, 1, H, W) int32, one gather from the
    grey table (``tables.grey_np``: Pillow's integer weights for every colour); inside a
    ``torch.compile`` trace, where no table is made, the same integer arithmetic."""
    if compiling():
        s = x[:, 0:1] * 19595 + x[:, 1:2] * 38470 + x[:, 2:3] * 7471 + 0x8000
        return torch.div(s, 65536, rounding_mode="floor")
    return grey_table(x.device)[x[:, 0:1], x[:, 1:2], x[:, 2:3]].to(torch.int32)


def _zero_padding(out: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, out, torch.zeros((), dtype=out.dtype, device=out.device))


def rgb_to_grayscale(images: torch.Tensor, sizes: torch.Tensor, mask: torch.Tensor
                     ) -> torch.Tensor:
    """Samples where ``mask (B,)`` turned grey (3 equal channels), the others as they are."""
    b = images.shape[0]
    m = to_device(mask, images.device).to(torch.bool).view(b, 1, 1, 1)
    x = images.to(torch.int32)
    g = grey_table(images.device)[x[:, 0:1], x[:, 1:2], x[:, 2:3]]  # uint8
    return torch.where(m, g.expand_as(images), images)


def erase(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, value: torch.Tensor
          ) -> torch.Tensor:
    """``boxes (B, 4)`` (top, left, height, width) set to ``value (B, 3)`` levels."""
    b, _, height, width = images.shape
    dev = images.device
    host = on_host(boxes, value)  # the masks made on the host, copied with the fill in one go
    parts = erase_parts(boxes, value, height, width, torch.device("cpu") if host else dev)
    if host:
        with riding(parts):
            parts = {k: take(k, v, dev) for k, v in parts.items()}
    in_rows, in_cols, fill = parts["erase.rows"], parts["erase.cols"], parts["erase.fill"]
    inside = (in_rows.unsqueeze(2) & in_cols.unsqueeze(1)).unsqueeze(1)  # (B, 1, H, W)
    return torch.where(inside, fill, images)


def erase_parts(boxes: torch.Tensor, value: torch.Tensor, height: int, width: int,
                where: torch.device) -> dict[str, torch.Tensor]:
    """What :func:`erase` needs, made on ``where``: each sample's rows (B, H) and columns
    (B, W) inside its box and its fill (B, 3, 1, 1) uint8."""
    b = boxes.shape[0]
    box = to_device(boxes, where).to(torch.int64)
    rows = torch.arange(height, device=where).view(1, -1)
    cols = torch.arange(width, device=where).view(1, -1)
    top, left = box[:, 0:1], box[:, 1:2]
    return {"erase.rows": (rows >= top) & (rows < top + box[:, 2:3]),
            "erase.cols": (cols >= left) & (cols < left + box[:, 3:4]),
            "erase.fill": to_device(value, where).to(torch.uint8).view(b, 3, 1, 1)}


def erase_noise(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                seeds: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``boxes (B, 4)`` set to keyed per-pixel noise: level ``table[c, noise_index(seed, c,
    y, x)]`` (``transforms.noise``; integer ops only) with ``seeds (B,)`` int64 and
    ``table (3, 65536)`` uint8."""
    from npu_data.transforms.noise import TABLE, noise_index

    b, c, height, width = images.shape
    dev = images.device
    seed = to_device(seeds, dev).to(torch.int64).view(b, 1, 1, 1)
    channel = torch.arange(c, device=dev, dtype=torch.int64).view(1, c, 1, 1)
    rows = torch.arange(height, device=dev, dtype=torch.int64).view(1, 1, height, 1)
    cols = torch.arange(width, device=dev, dtype=torch.int64).view(1, 1, 1, width)
    index = noise_index(seed, channel, rows, cols) + channel * TABLE
    noise = to_device(table, dev).reshape(-1)[index]  # (B, 3, H, W) uint8
    box = to_device(boxes, dev).to(torch.int64)
    top, left = box[:, 0:1], box[:, 1:2]
    in_rows = (rows.view(1, height) >= top) & (rows.view(1, height) < top + box[:, 2:3])
    in_cols = (cols.view(1, width) >= left) & (cols.view(1, width) < left + box[:, 3:4])
    inside = (in_rows.unsqueeze(2) & in_cols.unsqueeze(1)).unsqueeze(1)  # (B, 1, H, W)
    return torch.where(inside, noise, images)


# --- lookup tables ----------------------------------------------------------------------------
def histograms(images: torch.Tensor, valid: torch.Tensor | None,
               base: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 3, 256) int32: each sample's per-channel histogram over its valid pixels (None:
    all); ``base`` (B * 3,) int64 ``256 * row`` where it is made already."""
    b, c = images.shape[:2]
    dev = images.device
    if base is None:
        base = torch.arange(b * c, device=dev, dtype=torch.int64) * 256
    index = images + base.view(b, c, 1, 1)  # int64: the uint8 levels promoted exactly
    if valid is not None:
        dump = torch.full((), b * c * 256, dtype=torch.int64, device=dev)
        index = torch.where(valid, index, dump)
    index = _flat(index)
    counts = torch.zeros(b * c * 256 + 1, dtype=torch.int32, device=dev)
    counts.scatter_add_(0, index, torch.ones_like(index, dtype=torch.int32))
    return counts[:-1].view(b, c, 256)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The elements of ``t (B, C, H, W)`` as one flat view in memory order where its layout
    allows (contiguous or channels-last: no copy), in any order (for counting)."""
    if t.is_contiguous():
        return t.view(-1)
    if t.is_contiguous(memory_format=torch.channels_last):
        return t.permute(0, 2, 3, 1).reshape(-1)
    return t.reshape(-1)


def apply_luts(images: torch.Tensor, luts: torch.Tensor, valid: torch.Tensor | None,
               base: torch.Tensor | None = None) -> torch.Tensor:
    """Each sample's channel through its table ``luts (B, 3, 256)`` uint8 (one gather);
    ``base`` as for :func:`histograms`."""
    b, c = images.shape[:2]
    if base is None:
        base = torch.arange(b * c, device=images.device, dtype=torch.int64) * 256
    out = luts.reshape(-1)[images + base.view(b, c, 1, 1)]  # int64 indices
    return out if valid is None else _zero_padding(out, valid)


_RAMPS = DeviceTables("the level ramps")


def _levels(device: torch.device, start: int = 0) -> torch.Tensor:
    """(256,) int64 ``start .. start + 255`` on ``device`` (made once per device; made in
    place inside a ``torch.compile`` trace)."""
    if compiling():
        return torch.arange(start, start + 256, device=device, dtype=torch.int64)
    return _RAMPS.get(start, device, lambda: torch.arange(start, start + 256, dtype=torch.int64))


def posterize_luts(bits: torch.Tensor, channels: int = 3) -> torch.Tensor:
    """``level & ~(2**(8 - bits) - 1)`` for ``bits (B,)`` in 0..8."""
    step = torch.pow(2, 8 - bits.to(torch.int64)).view(-1, 1)
    v = _levels(bits.device).view(1, 256)
    lut = v - torch.remainder(v, step)
    return lut.to(torch.uint8).unsqueeze(1).expand(-1, channels, 256)


def solarize_luts(threshold: torch.Tensor, channels: int = 3) -> torch.Tensor:
    """``level`` below ``threshold (B,)``, ``255 - level`` from it on."""
    v = _levels(threshold.device).view(1, 256)
    lut = torch.where(v.to(torch.float32) < threshold.to(torch.float32).view(-1, 1), v, 255 - v)
    return lut.to(torch.uint8).unsqueeze(1).expand(-1, channels, 256)


def invert_luts(batch: int, device: torch.device, channels: int = 3) -> torch.Tensor:
    """``255 - level``."""
    return (255 - _levels(device)).to(torch.uint8).view(1, 1, 256).expand(batch, channels, 256)


_BINS = DeviceTables("the histogram bin weights")


def _bin_weights(device: torch.device) -> torch.Tensor:
    """(2, 256) int32: 1 for every bin (the first non-zero), the bin number + 1 (the last);
    made once per device (in place inside a ``torch.compile`` trace)."""
    def make(dev: torch.device | None = None) -> torch.Tensor:
        return torch.stack([torch.ones(256, dtype=torch.int32, device=dev),
                            torch.arange(1, 257, dtype=torch.int32, device=dev)])

    if compiling():
        return make(device)
    return _BINS.get("bins", device, make)


def _last_nonzero(hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, last)`` index of a non-zero bin of each ``hist (..., 256)`` int32 counts: the
    argmax of the first maximum of the non-zero flags, and of the flags times the bin numbers
    (one argmax for both; an empty histogram gives (0, 0))."""
    nz = hist.clamp(max=1)  # counts: 1 where non-zero
    both = torch.argmax(nz.unsqueeze(-2) * _bin_weights(hist.device), dim=-1)  # (..., 2)
    return both[..., 0], both[..., 1]


def equalize_luts(hist: torch.Tensor, bounds: tuple[torch.Tensor, torch.Tensor] | None = None
                  ) -> torch.Tensor:
    """Pillow's ``ImageOps.equalize`` tables from ``hist (B, 3, 256)``: ``step`` is the count
    without the last non-zero bin over 255, ``lut[i] = (step // 2 + count below i) // step``;
    the identity for one level or a zero step (one level or none makes the step 0: the count
    without the last non-zero bin is 0). ``bounds``: :func:`_last_nonzero` of ``hist``, where
    it is made already."""
    h = hist.to(torch.int64)
    _, last = _last_nonzero(hist) if bounds is None else bounds
    h_last = torch.gather(h, -1, last.unsqueeze(-1))
    step = torch.div(h.sum(-1, keepdim=True) - h_last, 255, rounding_mode="floor")
    below = torch.cumsum(h, -1) - h
    lut = torch.div(torch.div(step, 2, rounding_mode="floor") + below, step.clamp(min=1),
                    rounding_mode="floor").clamp(max=255)
    identity = _levels(h.device).view(1, 1, 256)
    return torch.where(step == 0, identity, lut).to(torch.uint8)


_TABLES = DeviceTables("the autocontrast table")


def autocontrast_table_np() -> np.ndarray:
    """(65536, 256) uint8: Pillow's autocontrast table for each ``lo * 256 + hi``:
    ``int(i * scale + offset)`` clipped, ``scale = 255.0 / (hi - lo)``, ``offset = -lo * scale``
    in float64 as Pillow's Python computes them; the identity where ``hi <= lo``."""
    out = np.tile(np.arange(256, dtype=np.uint8), (65536, 1))
    ix = np.arange(256, dtype=np.float64)
    for lo in range(255):
        hi = np.arange(lo + 1, 256, dtype=np.float64)
        scale = 255.0 / (hi - lo)
        offset = -lo * scale
        v = np.trunc(ix[None, :] * scale[:, None] + offset[:, None])
        out[lo * 256 + lo + 1:lo * 256 + 256] = np.clip(v, 0, 255).astype(np.uint8)
    return out


def autocontrast_table(device: torch.device) -> torch.Tensor:
    """:func:`autocontrast_table_np` on ``device`` (16 MB; made once, kept per device)."""
    return _TABLES.get("autocontrast", device,
                       lambda: torch.from_numpy(autocontrast_table_np()))


def autocontrast_luts(hist: torch.Tensor,
                      bounds: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Pillow's ``ImageOps.autocontrast`` tables from ``hist (B, 3, 256)`` (``bounds``:
    :func:`_last_nonzero` of it, where made already)."""
    lo, hi = _last_nonzero(hist) if bounds is None else bounds
    return autocontrast_table(hist.device)[torch.add(hi, lo, alpha=256)]


# --- float32 blends ---------------------------------------------------------------------------
def blend_products(factors: torch.Tensor) -> torch.Tensor:
    """(B, 511) float32 ``fl(f * d)`` for d = -255..255: ``f`` split as its bfloat16 part plus
    the rest, each product exact, so one rounding whether or not a compiler fuses them."""
    f = factors.to(torch.float32).view(-1, 1)
    hi = f.to(torch.bfloat16).to(torch.float32)
    lo = f - hi
    d = torch.arange(-255, 256, dtype=torch.float32, device=f.device).view(1, -1)
    return hi * d + lo * d


def _truncate(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(0.0, 255.0).to(torch.uint8)


def blend_luts(keys: torch.Tensor, prods: torch.Tensor, channels: int = 3) -> torch.Tensor:
    """Pillow's blend of a constant ``keys (B,)`` level with each level: ``trunc(clamp(key +
    fl(f * (v - key))))``, from ``prods`` (:func:`blend_products`)."""
    k = keys.to(torch.int64).view(-1, 1)
    idx = _levels(prods.device, 255).view(1, 256) - k
    t = torch.gather(prods, 1, idx) + k  # the float32 sum promotes the levels exactly
    return _truncate(t).unsqueeze(1).expand(-1, channels, 256)


def blend_pixels(key: torch.Tensor, x: torch.Tensor, prods: torch.Tensor,
                 base: torch.Tensor | None = None) -> torch.Tensor:
    """Pillow's blend of each pixel ``x`` (B, 3, H, W) int32 with ``key`` (B, 1 or 3, H, W)
    int32 levels: uint8 ``trunc(clamp(key + fl(f * (x - key))))``; ``base`` (B,) int32
    ``511 * b + 255`` where it is made already."""
    b = x.shape[0]
    if base is None:
        base = torch.arange(b, device=x.device, dtype=torch.int32) * 511 + 255
    # int32 indices; the float32 sum promotes ``key`` (levels: exact) as ``key.to(float32)``
    t = prods.reshape(-1)[torch.add(x - key, base.view(b, 1, 1, 1))] + key
    return _truncate(t)


def contrast_keys(lum: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """(B,) int64 ``int(mean + 0.5)`` of ``lum`` (B, 1, H, W) over the valid pixels (None:
    all of them)."""
    if valid is None:
        count = max(lum.shape[2] * lum.shape[3], 1)
        twice = torch.add(count, lum.sum((1, 2, 3), dtype=torch.int64), alpha=2)  # 2 t + n
        return torch.div(twice, 2 * count, rounding_mode="floor")
    total = torch.where(valid, lum, 0).sum((1, 2, 3), dtype=torch.int64)
    n = valid.sum((1, 2, 3), dtype=torch.int64)
    return torch.div(2 * total + n, 2 * n.clamp(min=1), rounding_mode="floor")


def smooth_parts(sizes: torch.Tensor, height: int, width: int, where: torch.device
                 ) -> dict[str, torch.Tensor]:
    """:func:`smooth`'s interior rows (B, H) and columns (B, W), made on ``where``."""
    size = to_device(sizes, where).to(torch.int64)
    r = torch.arange(height, device=where).view(1, -1)
    c = torch.arange(width, device=where).view(1, -1)
    return {"smooth.rows": (r >= 1) & (r < size[:, 0:1] - 1),
            "smooth.cols": (c >= 1) & (c < size[:, 1:2] - 1)}


def smooth(x: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Pillow's ``ImageFilter.SMOOTH`` of ``x`` (B, 3, H, W) int32: inside a 1-px border of
    the valid image, ``round(sum / 13)`` of the 3x3 kernel (1 1 1, 1 5 1, 1 1 1); the border
    (and images under 3 px) copied."""
    b, _, height, width = x.shape
    if height < 3 or width < 3:
        return x
    dev = x.device
    rows = x[:, :, :, :-2] + x[:, :, :, 1:-1] + x[:, :, :, 2:]  # (B, 3, H, W - 2)
    box = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]  # (B, 3, H - 2, W - 2)
    # round(s / 13) = floor((2 s + 13) / 26) = floor((s + 6) / 13) for integers s
    s6 = torch.add(box, x[:, :, 1:-1, 1:-1], alpha=4).add_(6)
    inner = torch.div(s6, 13, rounding_mode="floor")
    if filled(sizes, height, width):  # every sample fills the batch: its interior is a slice
        out = x.clone()
        out[:, :, 1:-1, 1:-1] = inner
        return out
    parts = smooth_parts(sizes, height, width, torch.device("cpu") if on_host(sizes) else dev)
    with riding(parts):  # host sizes: the masks made there
        in_r, in_c = (take(k, v, dev) for k, v in parts.items())
    interior = (in_r.unsqueeze(2) & in_c.unsqueeze(1)).unsqueeze(1)
    return torch.where(interior, torch.nn.functional.pad(inner, (1, 1, 1, 1)), x)


def adjust_sharpness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                     ) -> torch.Tensor:
    """``ImageEnhance.Sharpness``: blend ``SMOOTH`` (:func:`smooth`) with the image."""
    x = images.to(torch.int32)
    prods = blend_products(to_device(factors, images.device))
    out = blend_pixels(smooth(x, sizes), x, prods)
    height, width = images.shape[2:]
    return _zero_padding(out, valid_mask(sizes, height, width, images.device))


def lut_tables(op: str, batch: int, channels: int, device: torch.device,
               level: torch.Tensor | None, hist: Callable[[], torch.Tensor]) -> torch.Tensor:
    """(B, C, 256) uint8 tables of one table op (see :func:`lut_op`); ``hist()`` gives the
    histograms (:func:`histograms`) where the op needs them."""
    if op == "posterize":
        assert level is not None
        return posterize_luts(to_device(level, device), channels)
    if op == "solarize":
        assert level is not None
        return solarize_luts(to_device(level, device), channels)
    if op == "invert":
        return invert_luts(batch, device, channels)
    if op == "equalize":
        return equalize_luts(hist())
    return autocontrast_luts(hist())


def lut_op(images: torch.Tensor, sizes: torch.Tensor, op: str,
           level: torch.Tensor | None = None) -> torch.Tensor:
    """One table op for the whole batch: ``posterize`` (``level`` bits), ``solarize``
    (``level`` thresholds), ``invert``, ``equalize`` or ``autocontrast``."""
    b, c, height, width = images.shape
    dev = images.device
    valid = valid_mask(sizes, height, width, dev)
    luts = lut_tables(op, b, c, dev, level, lambda: histograms(images, valid))
    return apply_luts(images, luts, valid)


# --- one auto-augment step ----------------------------------------------------------------------
def present(ops: torch.Tensor, *names: str) -> bool:
    """Whether any sample runs one of ``names`` (always True when ``ops`` cannot be read)."""
    if not host_values(ops):
        return True
    return bool(torch.isin(ops, torch.tensor([_OP[n] for n in names])).any())


def policy_luts(op: torch.Tensor, prods: torch.Tensor, levels: torch.Tensor,
                keys: torch.Tensor | None, hist: torch.Tensor | None, channels: int
                ) -> torch.Tensor:
    """(B, C, 256) uint8: each sample's table for its op ``op (B,)`` (the identity for Color,
    Sharpness and the geometric ops), from the blend products ``prods``
    (:func:`blend_products`), ``levels (B,)``, the contrast ``keys (B,)`` and the histograms
    ``hist (B, C, 256)`` (None where no sample runs Contrast, or AutoContrast / Equalize)."""
    b, dev = op.shape[0], op.device
    ident = torch.arange(256, device=dev, dtype=torch.uint8).view(1, 1, 256).expand(
        b, channels, 256)
    cands: list[torch.Tensor | None] = [
        ident, blend_luts(torch.zeros(b, dtype=torch.int64, device=dev), prods, channels),
        blend_luts(keys, prods, channels) if keys is not None else None,
        posterize_luts(levels.clamp(0, 8), channels),
        solarize_luts(levels.to(torch.float32), channels),
        autocontrast_luts(hist) if hist is not None else None,
        equalize_luts(hist) if hist is not None else None, invert_luts(b, dev, channels)]
    stacked = torch.stack([t if t is not None else ident for t in cands], 1)  # (B, 8, C, 256)
    pick = to_device(_LUT_OF_OP, dev)[op].view(b, 1, 1, 1).expand(b, 1, channels, 256)
    return torch.gather(stacked, 1, pick)[:, 0]


def filled(sizes: torch.Tensor, height: int, width: int) -> bool:
    """Whether host ``sizes`` say that every sample fills the ``height x width`` batch (no
    padding: no masks to make)."""
    return host_values(sizes) and bool(((sizes[:, 0] == height) & (sizes[:, 1] == width)).all())


def host_step(ops: torch.Tensor, factors: torch.Tensor, levels: torch.Tensor, b: int,
               c: int) -> dict[str, torch.Tensor]:
    """A policy step's host-made parts: each sample's table where it needs no pixel
    statistics (the identity for Contrast, AutoContrast, Equalize, Color, Sharpness and the
    geometric ops: :func:`policy_luts` without keys or histograms), the blend products, which
    samples run each statistics op, and the gathers' row offsets."""
    op = ops.to(torch.int64)
    prods = blend_products(factors.to(torch.float32))
    parts = {"policy.luts": policy_luts(op, prods, levels.to(torch.int64), None, None,
                                        c).contiguous(),
             "policy.prods": prods,
             "policy.base": torch.arange(b * c, dtype=torch.int64) * 256,
             "policy.pixel_base": torch.arange(b, dtype=torch.int32) * 511 + 255}
    for name in ("Contrast", "AutoContrast", "Equalize", "Color"):
        parts[f"policy.{name}"] = (op == _OP[name]).view(b, 1, 1, 1)
    parts["policy.blend"] = parts["policy.Color"] | (op == _OP["Sharpness"]).view(b, 1, 1, 1)
    return parts


def policy_step(images: torch.Tensor, sizes: torch.Tensor, ops: torch.Tensor,
                factors: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """One op per sample: ``ops (B,)`` ids in :data:`POLICY_OPS`, ``factors (B,)`` the
    enhance factors (Brightness, Color, Contrast, Sharpness), ``levels (B,)`` the Posterize
    bits or Solarize thresholds. The geometric ops leave their samples as they are (the
    caller runs them). Table ops are one gather; Color and Sharpness run where present. With
    host parameters the tables that need no pixel statistics are made on the host and reach
    the device in one copy; host ``sizes`` of a full batch skip the padding masks."""
    b, c, height, width = images.shape
    dev = images.device
    if not on_host(ops, factors, levels):
        return _device_step(images, sizes, ops, factors, levels)
    valid = None if filled(sizes, height, width) else valid_mask(sizes, height, width, dev)
    host = host_step(ops, factors, levels, b, c)
    with riding(host):
        parts = {k: take(k, v, dev) for k, v in host.items()}
    per_pixel = present(ops, "Color", "Sharpness")  # the blends that are not tables
    x = images.to(torch.int32) if per_pixel or present(ops, "Contrast") else images
    lum = grey(x) if present(ops, "Contrast", "Color") else None
    prods, luts = parts["policy.prods"], parts["policy.luts"]
    if lum is not None and present(ops, "Contrast"):
        keys = contrast_keys(lum, valid)
        luts = torch.where(parts["policy.Contrast"][:, 0], blend_luts(keys, prods, c), luts)
    if present(ops, "AutoContrast", "Equalize"):
        hist = histograms(images, valid, parts["policy.base"])
        bounds = _last_nonzero(hist)  # the first and last level: both ops use them
        for name, make in (("AutoContrast", autocontrast_luts), ("Equalize", equalize_luts)):
            if present(ops, name):
                luts = torch.where(parts[f"policy.{name}"][:, 0], make(hist, bounds), luts)
    out = apply_luts(images, luts, valid, parts["policy.base"])
    if not per_pixel:
        return out
    # Color blends with the grey, Sharpness with the smoothed image: one blend of each
    # sample's own key
    key = lum if lum is not None and present(ops, "Color") else None
    if present(ops, "Sharpness"):
        smoothed = smooth(x, sizes)
        key = smoothed if key is None else torch.where(parts["policy.Color"], key, smoothed)
    assert key is not None
    blended = blend_pixels(key, x, prods, parts["policy.pixel_base"])
    out = torch.where(parts["policy.blend"], blended, out)
    return out if valid is None else _zero_padding(out, valid)


def _device_step(images: torch.Tensor, sizes: torch.Tensor, ops: torch.Tensor,
                 factors: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """:func:`policy_step` with parameters on the device: every table made there."""
    b, c, height, width = images.shape
    dev = images.device
    op = to_device(ops, dev).to(torch.int64)
    f = to_device(factors, dev).to(torch.float32)
    lvl = to_device(levels, dev).to(torch.int64)
    valid = valid_mask(sizes, height, width, dev)
    per_pixel = present(ops, "Color", "Sharpness")  # the blends that are not tables
    x = images.to(torch.int32) if per_pixel or present(ops, "Contrast") else images
    lum = grey(x) if present(ops, "Contrast", "Color") else None
    prods = blend_products(f)
    keys = contrast_keys(lum, valid) if lum is not None else None
    hist = histograms(images, valid) if present(ops, "AutoContrast", "Equalize") else None
    out = apply_luts(images, policy_luts(op, prods, lvl, keys, hist, c), valid)
    if not per_pixel:
        return out
    if lum is not None and present(ops, "Color"):
        color = blend_pixels(lum, x, prods)
        out = torch.where((op == _OP["Color"]).view(b, 1, 1, 1), color, out)
    if present(ops, "Sharpness"):
        sharp = blend_pixels(smooth(x, sizes), x, prods)
        out = torch.where((op == _OP["Sharpness"]).view(b, 1, 1, 1), sharp, out)
    return _zero_padding(out, valid)
