"""Pure device kernels with explicit per-sample parameters (torchvision v2's functional layer).

Every function takes a padded uint8 batch ``images (B, C, H, W)`` (any memory format; image
content at the top-left) and ``sizes (B, 2)`` — the valid (height, width) of each sample —
and runs wherever the tensors are (NPU, CUDA, CPU) with no host synchronisation and no Python
loop over samples or pixels. Semantics are Pillow's (torchvision's PIL path); the CPU
versions are in :mod:`npu_data.transforms.reference` and the agreement is checked by
:mod:`npu_data.transforms.parity`. Padding outside ``sizes`` comes out as 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserError
from npu_data.transforms import _kernels, _native
from npu_data.transforms._kernels import color as _color
from npu_data.transforms._kernels.resample import resize_two_passes, vertical_first_rule

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "hflip",
    "normalize",
    "resized_crop",
    "to_dtype",
]


def _check_images(images: torch.Tensor, sizes: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
        kind = images.dtype if isinstance(images, torch.Tensor) else type(images).__name__
        raise UserError(f"images must be a uint8 tensor (B, C, H, W), got {kind}: "
                        "convert with .to(torch.uint8) or use the loaders' batches")
    if images.ndim != 4 or images.shape[1] != 3:
        raise UserError(f"images must have shape (B, 3, H, W), got {tuple(images.shape)}")
    if sizes.ndim != 2 or sizes.shape != (images.shape[0], 2):
        raise UserError(f"sizes must have shape ({images.shape[0]}, 2) (height, width), "
                        f"got {tuple(sizes.shape)}")


def _check_factors(factors: torch.Tensor, batch: int, name: str) -> torch.Tensor:
    f = torch.as_tensor(factors)
    if f.ndim == 0:
        f = f.expand(batch)
    if f.shape != (batch,):
        raise UserError(f"{name} factors must have shape ({batch},), got {tuple(f.shape)}")
    return f


def _out_size(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        h, w = size, size
    else:
        h, w = (int(s) for s in size)
    if h <= 0 or w <= 0:
        raise UserError(f"output size must be positive, got {size!r}")
    return h, w


def _mask_padding(out: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    mask = _color.valid_mask(sizes, out.shape[-2], out.shape[-1])
    return torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))


def resized_crop(
    images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, size: int | Sequence[int]
) -> torch.Tensor:
    """Crop ``boxes (B, 4)`` = (top, left, height, width) and resize each to ``size``.

    Pillow's ``Image.resize(BILINEAR)`` on the cropped region: antialiased (the filter
    support grows with the downscale factor), 22-bit fixed-point weights, a horizontal
    pass then a vertical pass with an 8-bit intermediate (Pillow >= 13: vertical first when
    the height shrinks more than twice as much as the width). Exact on the CPU kernels and
    the torch kernels alike. Returns (B, C, h, w) uint8.

    The torch kernels read nothing back from the device: with ``boxes`` on the host (a CPU
    tensor) each sample runs its own pass order once; with device boxes both orders run and
    each sample keeps its own.
    """
    _check_images(images, sizes)
    out_h, out_w = _out_size(size)
    if boxes.shape != (images.shape[0], 4):
        raise UserError(f"crop boxes must have shape ({images.shape[0]}, 4) "
                        f"(top, left, height, width), got {tuple(boxes.shape)}")
    bx = boxes.to(device=images.device, dtype=torch.int64)
    native = _native.for_tensor(images)
    if native is not None:
        _check_boxes_inside(bx, images)
        return native.resized_crop(images, bx, out_h, out_w, vertical_first_rule())
    if not _kernels.host_values(boxes):
        # The pass order of each sample is on the device: both orders for every sample,
        # each picked per sample (no read back; a box outside the batch reads clamped rows).
        # Host boxes avoid the double work.
        v_first = _vertical_first(bx, out_h, out_w)
        hv = _resized_crop_torch(images, bx, out_h, out_w, vertical=False)
        vh = _resized_crop_torch(images, bx, out_h, out_w, vertical=True)
        return torch.where(v_first.view(-1, 1, 1, 1), vh, hv).contiguous()
    host = boxes.to(torch.int64)  # host boxes: checked and read whatever the images' device
    _check_boxes_inside(host, images)
    order = _vertical_first(host, out_h, out_w).numpy()
    if not order.any() or order.all():
        return _resized_crop_torch(images, bx, out_h, out_w, vertical=bool(order.any()))
    # Pillow >= 13 runs the vertical pass first when the height shrinks more than twice as
    # much as the width: each sample runs its own order once, in two groups known here.
    out = images.new_empty((images.shape[0], images.shape[1], out_h, out_w))
    for vertical in (False, True):
        idx = torch.from_numpy(np.flatnonzero(order == vertical)).to(images.device)
        part = _resized_crop_torch(images.index_select(0, idx), bx.index_select(0, idx),
                                   out_h, out_w, vertical=vertical)
        out.index_copy_(0, idx, part)
    return out


def _vertical_first(bx: torch.Tensor, out_h: int, out_w: int) -> torch.Tensor:
    """(B,) bool: the samples Pillow >= 13 resizes vertically first (the height shrinks by
    more than twice as many pixels as the width)."""
    ch, cw = bx[:, 2], bx[:, 3]
    if not vertical_first_rule():
        return torch.zeros_like(ch, dtype=torch.bool)
    return ((ch - out_h) > 0) & ((ch - out_h) > 2 * (cw - out_w))


def _check_boxes_inside(bx: torch.Tensor, images: torch.Tensor) -> None:
    height, width = images.shape[-2:]
    inside = (bx[:, 0] >= 0) & (bx[:, 1] >= 0) & (bx[:, 2] >= 1) & (bx[:, 3] >= 1) & \
        (bx[:, 0] + bx[:, 2] <= height) & (bx[:, 1] + bx[:, 3] <= width)
    if not bool(inside.all()):
        i = int(torch.nonzero(~inside)[0, 0])
        raise UserError(f"crop box {bx[i].tolist()} of sample {i} (top, left, height, width) "
                        f"lies outside the {height}x{width} batch: clip it to the image")


def _resized_crop_torch(images: torch.Tensor, bx: torch.Tensor, out_h: int, out_w: int,
                        vertical: bool) -> torch.Tensor:
    """Both passes on every sample of the batch, horizontal or ``vertical`` first (any
    device): integer tap sums over gathered rows (``_kernels.resample``)."""
    top, left, ch, cw = bx.unbind(1)
    hwc = images.permute(0, 2, 3, 1)  # (B, H, W, C): free for channels-last batches
    if vertical:  # rows of H first, then the columns: (B, out_w, out_h, C)
        z = resize_two_passes(hwc, (top, ch, out_h), (left, cw, out_w))
        return z.permute(0, 3, 2, 1).contiguous()
    z = resize_two_passes(hwc.transpose(1, 2), (left, cw, out_w), (top, ch, out_h))
    return z.permute(0, 3, 1, 2).contiguous()


def hflip(images: torch.Tensor, sizes: torch.Tensor, flip_mask: torch.Tensor) -> torch.Tensor:
    """Mirror each flagged sample left-right within its valid width (exact)."""
    _check_images(images, sizes)
    native = _native.for_tensor(images)
    if native is not None:
        return native.hflip(images, sizes, flip_mask.to(torch.bool))
    width = images.shape[-1]
    flip = flip_mask.to(device=images.device, dtype=torch.bool).view(-1, 1)
    cols = torch.arange(width, device=images.device).view(1, width)
    w = sizes[:, 1].to(device=images.device, dtype=torch.int64).view(-1, 1)
    src = torch.where(flip & (cols < w), w - 1 - cols, cols)  # (B, W)
    index = src.view(-1, 1, 1, width).expand_as(images)
    return torch.gather(images, 3, index)


def adjust_brightness(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Brightness(factor)`` per sample (blend with black; exact)."""
    _check_images(images, sizes)
    f = _checked_nonneg(factors, images, "brightness")
    fast = _compiled_colour_op(images, sizes, 0, f)
    if fast is not None:
        return fast
    return _color.blend(torch.zeros_like(images), images, f)


def adjust_contrast(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Contrast(factor)`` per sample: blend with the integer mean of the
    grayscale image over its valid region (exact)."""
    _check_images(images, sizes)
    f = _checked_nonneg(factors, images, "contrast")
    fast = _compiled_colour_op(images, sizes, 1, f)
    if fast is not None:
        return fast
    mean = _color.contrast_mean(images, sizes.to(images.device)).view(-1, 1, 1, 1)
    out = _color.blend(mean.expand_as(images), images, f)
    return _mask_padding(out, sizes.to(images.device))


def adjust_saturation(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Color(factor)`` per sample: blend with each pixel's grayscale (exact)."""
    _check_images(images, sizes)
    f = _checked_nonneg(factors, images, "saturation")
    fast = _compiled_colour_op(images, sizes, 2, f)
    if fast is not None:
        return fast
    gray = _color.grayscale(images).expand_as(images)
    return _color.blend(gray, images, f)


def adjust_hue(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor, direct: bool = False
) -> torch.Tensor:
    """torchvision's PIL ``adjust_hue``: Pillow HSV, ``H += uint8(hue * 255)`` wrapping, back.

    By default through two cached 2**24-entry tables (two gathers per pixel); ``direct=True``
    evaluates Pillow's arithmetic per pixel instead (same values, many more passes, float64:
    a reference for the host, not for accelerators).
    """
    _check_images(images, sizes)
    f = _check_factors(factors, images.shape[0], "hue")
    if _kernels.host_values(f) and bool(torch.any((f < -0.5) | (f > 0.5))):
        raise UserError("hue factors must lie in [-0.5, 0.5]")
    f = f.to(images.device)
    shift = _color.hue_shift(f)
    fast = None if direct else _compiled_colour_op(images, sizes, 3, torch.ones_like(f), shift)
    if fast is not None:
        return fast
    if direct:
        hsv = _color.rgb_to_hsv(images)
        h = torch.remainder(hsv[:, 0].to(torch.int64) + shift.view(-1, 1, 1), 256)
        hsv = torch.stack([h.to(torch.uint8), hsv[:, 1], hsv[:, 2]], dim=1)
        return _color.hsv_to_rgb(hsv)
    return _color.adjust_hue_lut(images, shift)


def _compiled_colour_op(images: torch.Tensor, sizes: torch.Tensor, op: int,
                        factors: torch.Tensor, shifts: torch.Tensor | None = None
                        ) -> torch.Tensor | None:
    """One colour op (``color_sequence`` id ``op``) through the compiled CPU kernels, or
    ``None`` when they do not apply to these tensors."""
    if _native.for_tensor(images) is None:
        return None
    b = images.shape[0]
    order = torch.full((b, 1), op, dtype=torch.int64)
    shift = shifts if shifts is not None else torch.zeros(b, dtype=torch.int64)
    return color_sequence(images, sizes, order, factors.view(-1, 1).expand(b, 3), shift)


def color_sequence(images: torch.Tensor, sizes: torch.Tensor, order: torch.Tensor,
                   factors: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Several colour ops per sample in one pass over the batch (compiled CPU kernels only).

    ``order (B, n)``: op ids applied left to right (0 brightness, 1 contrast, 2 saturation,
    3 hue; -1 skips); ``factors (B, 3)``: brightness, contrast and saturation factors;
    ``shifts (B,)``: hue shifts in levels (:func:`npu_data.transforms._kernels.color.hue_shift`).
    """
    native = _native.for_tensor(images)
    if native is None:
        raise UserError("color_sequence needs the compiled CPU kernels on CPU tensors")
    return native.color_ops(images, sizes.to(torch.int64), order.to(torch.int64),
                            factors.to(torch.float32), shifts.to(torch.int64))


def _checked_nonneg(factors: torch.Tensor, images: torch.Tensor, name: str) -> torch.Tensor:
    f = _check_factors(factors, images.shape[0], name)
    # Validation reads the values only of host (CPU) tensors: no host sync on accelerators.
    if _kernels.host_values(f) and bool(torch.any(f < 0)):
        raise UserError(f"{name} factors must be non-negative")
    return f.to(images.device)


def to_dtype(images: torch.Tensor, dtype: torch.dtype = torch.float32,
             channels_last: bool = False) -> torch.Tensor:
    """uint8 0..255 to ``dtype`` 0..1, optionally in channels-last memory format."""
    out = images.to(dtype).div_(255.0)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
) -> torch.Tensor:
    """``(images / 255 - mean) / std`` in ``dtype`` (float32 or bfloat16), the last step."""
    if len(mean) != images.shape[1] or len(std) != images.shape[1]:
        raise UserError(f"mean and std need {images.shape[1]} values, got {len(mean)}, {len(std)}")
    if any(s <= 0 for s in std):
        raise UserError(f"std values must be positive, got {list(std)}")
    m = torch.tensor(mean, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    native = _native.for_tensor(images)
    if native is not None and images.dtype == torch.uint8:
        out = native.normalize(images, m.flatten(), s.flatten(), channels_last)
        return out if dtype == torch.float32 else out.to(dtype)
    out = ((images.to(torch.float32) / 255.0 - m) / s).to(dtype)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out
