"""Pure device kernels with explicit per-sample parameters (torchvision v2's functional layer).

Every function takes a padded uint8 batch ``images (B, C, H, W)`` (any memory format; image
content at the top-left) and ``sizes (B, 2)`` — the valid (height, width) of each sample —
and runs wherever the tensors are (NPU, CUDA, CPU) with no host synchronisation and no Python
loop over samples or pixels. Semantics are Pillow's (torchvision's PIL path); the CPU
versions are in ``npu_data.transforms.oracle.pillow`` and the agreement is checked by
``npu_data.transforms.oracle.measures``. Padding outside ``sizes`` comes out as 0. Host ``sizes`` are
checked inside the batch (0..H by 0..W; 1.. for the warps) before any kernel runs, so both
backends give the same line; a batch of no samples is valid for every op.

Each function validates its arguments, then runs the implementation that
``npu_data.transforms._dispatch.kernel`` picks for the images (compiled CPU kernels or
torch ops): one dispatch point per op. Per-sample parameters may live on the host or on the
images' device; host values are read only to validate them or to pick a cheaper path.
:func:`riding`, :func:`take` and the ``*_riders`` makers (no ops: the end of the module) are
how a transform sends a batch's host parameters to the device in one copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import _kernels, maps
from npu_data.transforms._dispatch import kernel
from npu_data.transforms._kernels import color as _color
from npu_data.transforms._kernels import jitter as _jitter
from npu_data.transforms._kernels import mixing as _mixing
from npu_data.transforms._kernels import pixel as _pixel
from npu_data.transforms._kernels import warp as _warp
from npu_data.transforms._kernels import warp_tables
from npu_data.transforms._kernels.pixel import POLICY_OPS as _POLICY_OPS
from npu_data.transforms._kernels.resample import FILTERS
from npu_data.transforms.base import donated
from npu_data.transforms.maps import check_fill
from npu_data.transforms.maps import check_interpolation as check_warp_interpolation

COLOR_OPS = ("brightness", "contrast", "saturation", "hue")
"""``color_jitter``'s op ids: the index of each op's name (0 brightness ... 3 hue)."""
POLICY_OPS = _POLICY_OPS
"""``policy_step``'s op ids: the index of each auto-augment op's name (torchvision's names:
0 Identity, 1-5 the geometric ops, 6 Brightness ... 14 Invert)."""

INTERPOLATIONS = tuple(FILTERS)
"""The resize filters, Pillow's ``Image.Resampling`` of the same name, each exact:
``"bilinear"`` (the default), ``"bicubic"``, ``"lanczos"``."""

__all__ = [
    "COLOR_OPS",
    "POLICY_OPS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "adjust_sharpness",
    "affine",
    "autocontrast",
    "choose",
    "color_jitter",
    "crop",
    "cutmix",
    "equalize",
    "erase",
    "gaussian_blur",
    "hflip",
    "invert",
    "mixup",
    "normalize",
    "permute_channels",
    "policy_step",
    "posterize",
    "resized_crop",
    "resized_crop_list",
    "rgb_to_grayscale",
    "rotate",
    "soft_labels",
    "solarize",
    "to_dtype",
    "vflip",
    "warp",
]


def _check_images(images: torch.Tensor, sizes: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
        kind = images.dtype if isinstance(images, torch.Tensor) else type(images).__name__
        raise UserTypeError(f"images must be a uint8 tensor (B, C, H, W), got {kind}: "
                            "convert with .to(torch.uint8) or use the loaders' batches")
    if images.ndim != 4 or images.shape[1] != 3:
        raise UserValueError(f"images must have shape (B, 3, H, W), got {tuple(images.shape)}")
    if sizes.ndim != 2 or sizes.shape != (images.shape[0], 2):
        raise UserValueError(f"sizes must have shape ({images.shape[0]}, 2) (height, width), "
                             f"got {tuple(sizes.shape)}")
    if _kernels.host_values(sizes):
        _check_sizes(sizes, images.shape[2], images.shape[3], 0)


def _check_sizes(sizes: torch.Tensor, height: int, width: int, least: int) -> None:
    """Host ``sizes`` inside the batch (``least`` <= size <= the batch's): the same one line
    for the compiled and the torch kernels, which would otherwise clamp or index differently."""
    sz = sizes.to(torch.int64)
    bad = (sz < least).any(1) | (sz[:, 0] > height) | (sz[:, 1] > width)
    if bool(bad.any()):
        i = int(bad.to(torch.int64).argmax())
        raise UserValueError(f"sizes: sample {i}'s valid size {sz[i].tolist()} is not inside "
                             f"the {height}x{width} batch ({least}..{height} by {least}..{width})"
                             " — pass each image's own (height, width)")


def _check_factors(factors: torch.Tensor, batch: int, name: str) -> torch.Tensor:
    f = torch.as_tensor(factors)
    if f.ndim == 0:
        f = f.expand(batch)
    if f.shape != (batch,):
        raise UserValueError(f"{name} factors must have shape ({batch},), got {tuple(f.shape)}")
    return f


def _out_size(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        h, w = size, size
    else:
        h, w = (int(s) for s in size)
    if h <= 0 or w <= 0:
        raise UserValueError(f"output size must be positive, got {size!r}")
    return h, w


def check_interpolation(interpolation: object, who: str) -> str:
    """The resize filter a transform or op was given, checked.

    Args:
        interpolation: What the user passed.
        who: The transform or op, named in the error.

    Returns:
        ``interpolation``, one of :data:`INTERPOLATIONS`.

    Raises:
        UserValueError: Anything else (one line naming ``who`` and the choices).
    """
    if not isinstance(interpolation, str) or interpolation not in FILTERS:
        raise UserValueError(f"{who}: interpolation must be one of "
                             f"{', '.join(repr(k) for k in FILTERS)}, got {interpolation!r}")
    return interpolation


def resized_crop(
    images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, size: int | Sequence[int],
    windows: torch.Tensor | None = None, flip: torch.Tensor | None = None, *,
    interpolation: str = "bilinear",
) -> torch.Tensor:
    """Crop boxes and resize each to ``size``: Pillow's ``Image.resize`` per sample with
    ``BILINEAR`` (default), ``BICUBIC`` or ``LANCZOS``.

    Antialiased (the filter support grows with the downscale factor), 22-bit fixed-point
    weights, a horizontal pass then a vertical pass with an 8-bit intermediate clipped to
    0..255 (Pillow >= 13: vertical first when the height shrinks more than twice as much as
    the width, whatever the filter). Exact on the
    CPU kernels and the torch kernels alike; the torch kernels read nothing back from the
    device and run each sample in its own pass order in one batch of a few ops
    (``_kernels.resample``).

    With ``windows``, each box is resized whole to ``(full_height, full_width)`` (Pillow's pass
    order for that resize) and the ``size`` window at ``(top, left)`` of the result is kept —
    exactly Pillow's resize followed by a crop; outputs outside the resized image are 0
    (torchvision's ``CenterCrop`` padding). The window's coefficients are Pillow's own for the
    whole resize, made on the host in float64.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        boxes: (B, 4) crop boxes (top, left, height, width) in each image.
        size: Output (height, width), or one int for both.
        windows: Optional (B, 4) int64 (top, left, full_height, full_width), host tensors like
            ``boxes`` then: keep a window of each box resized whole.
        flip: Optional (B,) bool: mirror those samples' results left-right (folded into the
            resampling tables: no extra pass; with ``windows``, the whole window is mirrored
            after the resize).
        interpolation: ``"bilinear"``, ``"bicubic"`` (a = -0.5) or ``"lanczos"`` (3 lobes):
            Pillow's filter of that name. A window's pixels read reach the filter's support
            (times the downscale) around it.

    Returns:
        (B, 3, h, w) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, a non-positive ``size``, windows or
            boxes not on the host when ``windows`` is given, a window size below 1, or an
            unknown ``interpolation``.
    """
    _check_images(images, sizes)
    check_interpolation(interpolation, "resized_crop")
    out_h, out_w = _out_size(size)
    if boxes.shape != (images.shape[0], 4):
        raise UserValueError(f"crop boxes must have shape ({images.shape[0]}, 4) "
                             f"(top, left, height, width), got {tuple(boxes.shape)}")
    if flip is not None and tuple(flip.shape) != (images.shape[0],):
        raise UserValueError(f"flip must have shape ({images.shape[0]},), got {tuple(flip.shape)}")
    impl = kernel("resized_crop", images)
    if windows is None:
        return impl(images, sizes, boxes.to(torch.int64), out_h, out_w, flip=flip,
                    interpolation=interpolation)
    if windows.shape != (images.shape[0], 4):
        raise UserValueError(f"crop windows must have shape ({images.shape[0]}, 4) (top, left, "
                             f"full height, full width), got {tuple(windows.shape)}")
    if not (windows.is_cpu and boxes.is_cpu):
        raise UserValueError("resized_crop: windows and boxes must be host (CPU) tensors — the "
                             "windows' coefficient tables are made on the host")
    if _kernels.host_values(windows) and bool((windows[:, 2:] < 1).any()):
        raise UserValueError(f"resized_crop: window full sizes must be >= 1, got "
                             f"{windows[:, 2:].tolist()}")
    out = impl(images, sizes, boxes.to(torch.int64), out_h, out_w,
               windows=windows.to(torch.int64), interpolation=interpolation)
    if flip is None:
        return out
    out_sizes = torch.tensor([[out_h, out_w]] * out.shape[0], dtype=torch.int64)
    return hflip(out, out_sizes.to(out.device), flip)


def resized_crop_list(images: Sequence[torch.Tensor], boxes: torch.Tensor, out: torch.Tensor,
                      windows: torch.Tensor | None = None, *, interpolation: str = "bilinear"
                      ) -> torch.Tensor:
    """:func:`resized_crop` of images of different sizes, each into its row of ``out``.

    Args:
        images: ``B`` uint8 ``(H, W, 3)`` host tensors (a reader's: views of a memory map,
            decoded JPEG regions); nothing is copied into a padded batch first.
        boxes: ``(B, 4)`` int64 (top, left, height, width) in each image's pixels (a box
            may reach past an image where a window reads only inside it).
        out: ``(B, 3, h, w)`` uint8, contiguous: the output, written in place.
        windows: ``(B, 4)`` int64 as in :func:`resized_crop`, or None.
        interpolation: the filter, as in :func:`resized_crop`.

    Returns:
        ``out``, each row the Pillow-exact resize of its box (or window).

    Raises:
        UserError: shapes or dtypes that do not match, or an unknown ``interpolation``.
    """
    check_interpolation(interpolation, "resized_crop_list")
    b = len(images)
    if out.dtype != torch.uint8 or out.ndim != 4 or out.shape[:2] != (b, 3):
        raise UserValueError(f"resized_crop_list: out must be a uint8 tensor ({b}, 3, h, w), got "
                             f"{out.dtype} {tuple(out.shape)}")
    if any(t.dtype != torch.uint8 or t.ndim != 3 or t.shape[2] != 3 for t in images):
        raise UserValueError("resized_crop_list: images must be uint8 (H, W, 3) tensors")
    if boxes.shape != (b, 4) or (windows is not None and windows.shape != (b, 4)):
        raise UserValueError(f"resized_crop_list: boxes and windows must have shape ({b}, 4)")
    if windows is not None and bool((windows[:, 2:] < 1).any()):
        raise UserValueError(f"resized_crop_list: window full sizes must be >= 1, got "
                             f"{windows[:, 2:].tolist()}")
    impl = kernel("resized_crop_list", out)
    return impl(list(images), boxes.to(torch.int64), out,  # type: ignore[no-any-return]
                None if windows is None else windows.to(torch.int64),
                interpolation=interpolation)


def hflip(images: torch.Tensor, sizes: torch.Tensor, flip_mask: torch.Tensor) -> torch.Tensor:
    """Mirror each flagged sample left-right within its valid width (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        flip_mask: (B,) bool: which samples to mirror.

    Returns:
        (B, 3, H, W) uint8, padding left as 0.

    Raises:
        UserError: ``images`` or ``sizes`` of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    return kernel("hflip", images)(images, sizes, flip_mask, inplace=donated(images))


def adjust_brightness(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Brightness(factor)`` per sample (blend with black; exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        factors: (B,) or a scalar, >= 0: 1 leaves a sample as it is.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a negative factor (host factors
            only are read: no device synchronisation).
    """
    f = _enhance_factors(images, sizes, factors, "brightness")
    return kernel("adjust_brightness", images)(images, sizes, f)


def adjust_contrast(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Contrast(factor)`` per sample: blend with the integer mean of the
    grayscale image over its valid region (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        factors: (B,) or a scalar, >= 0: 1 leaves a sample as it is.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a negative factor (host factors
            only are read: no device synchronisation).
    """
    f = _enhance_factors(images, sizes, factors, "contrast")
    return kernel("adjust_contrast", images)(images, sizes, f)


def adjust_saturation(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """``ImageEnhance.Color(factor)`` per sample: blend with each pixel's grayscale (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        factors: (B,) or a scalar, >= 0: 1 leaves a sample as it is.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a negative factor (host factors
            only are read: no device synchronisation).
    """
    f = _enhance_factors(images, sizes, factors, "saturation")
    return kernel("adjust_saturation", images)(images, sizes, f)


def adjust_hue(
    images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor, direct: bool = False
) -> torch.Tensor:
    """torchvision's PIL ``adjust_hue``: Pillow HSV, ``H += uint8(hue * 255)`` wrapping, back.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        factors: (B,) or a scalar hue shift in [-0.5, 0.5]: 0 leaves a sample as it is.
        direct: False (default): two cached 2**24-entry tables (two gathers per pixel); True:
            Pillow's arithmetic per pixel (same values, many more passes, float64: a reference
            for the host, not for accelerators).

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a host factor outside [-0.5, 0.5].
    """
    _check_images(images, sizes)
    shifts = _hue_shifts(factors, images)
    op = "adjust_hue_direct" if direct else "adjust_hue"
    return kernel(op, images)(images, sizes, shifts)


def color_jitter(images: torch.Tensor, sizes: torch.Tensor, ops: Sequence[int],
                 order: torch.Tensor | None, brightness: torch.Tensor, contrast: torch.Tensor,
                 saturation: torch.Tensor, hue: torch.Tensor, *, full: bool | None = None
                 ) -> torch.Tensor:
    """Several colour ops per sample in one call: ColorJitter's sequence.

    Equal, sample by sample, to the single ops applied in each sample's order.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        ops: The op ids in play, distinct indices into ``COLOR_OPS`` (0 brightness,
            1 contrast, 2 saturation, 3 hue).
        order: (B, len(ops)): each sample's own permutation of ``ops`` (applied left to
            right), or None for ``ops`` in that order for every sample.
        brightness: (B,) factors as for ``adjust_brightness`` (used only if its op is in
            ``ops``; 1 leaves a sample as it is).
        contrast: (B,) factors as for ``adjust_contrast``.
        saturation: (B,) factors as for ``adjust_saturation``.
        hue: (B,) shifts in [-0.5, 0.5] as for ``adjust_hue`` (0 leaves a sample as it is).
        full: True promises that every sample fills the whole batch (``sizes`` all (H, W): no
            padding to handle, as after a crop); None finds out from host ``sizes``.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: Repeated or unknown op ids, an ``order`` of the wrong shape, or a tensor or
            factor ``adjust_*`` would reject.
    """
    _check_images(images, sizes)
    ids = [int(op) for op in ops]
    if len(set(ids)) != len(ids) or not all(0 <= op < len(COLOR_OPS) for op in ids):
        raise UserValueError(f"color_jitter: ops must be distinct ids in 0..3 {COLOR_OPS}, "
                             f"got {list(ops)}")
    if order is not None and tuple(order.shape) != (images.shape[0], len(ids)):
        raise UserValueError(f"color_jitter: order must have shape ({images.shape[0]}, {len(ids)}) "
                             f"(one permutation of ops per sample), got {tuple(order.shape)}")
    factors = torch.stack([_checked_nonneg(brightness, images, "brightness"),
                           _checked_nonneg(contrast, images, "contrast"),
                           _checked_nonneg(saturation, images, "saturation")], dim=1)
    shifts = _hue_shifts(hue, images)
    return kernel("color_jitter", images)(images, sizes, ids, order, factors, shifts,
                                          inplace=donated(images), full=full)


def _hue_shifts(factors: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    f = _check_factors(factors, images.shape[0], "hue")
    if _kernels.host_values(f) and bool(torch.any((f < -0.5) | (f > 0.5))):
        raise UserValueError("hue factors must lie in [-0.5, 0.5]")
    return _color.hue_shift(f)  # where the factors are: the kernels move what they need


def _enhance_factors(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor,
                     name: str) -> torch.Tensor:
    """The checks of ``adjust_<name>`` (brightness, contrast, saturation, sharpness): the
    images, then the factors, non-negative, as (B,) or a scalar."""
    _check_images(images, sizes)
    return _checked_nonneg(factors, images, name)


def _checked_nonneg(factors: torch.Tensor, images: torch.Tensor, name: str) -> torch.Tensor:
    f = _check_factors(factors, images.shape[0], name)
    # Validation reads the values only of host (CPU) tensors: no host sync on accelerators.
    if _kernels.host_values(f) and bool(torch.any(f < 0)):
        raise UserValueError(f"{name} factors must be non-negative")
    return f


def to_dtype(images: torch.Tensor, dtype: torch.dtype = torch.float32,
             channels_last: bool = False) -> torch.Tensor:
    """uint8 0..255 to ``dtype`` 0..1.

    Args:
        images: uint8 tensor, any shape.
        dtype: The floating-point output dtype.
        channels_last: Give the output ``torch.channels_last`` memory format (4-D input).

    Returns:
        ``images / 255`` in ``dtype``.
    """
    out = images.to(dtype).div_(255.0)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
) -> torch.Tensor:
    """``(images / 255 - mean) / std`` in ``dtype``: the last step of a pipeline. Computed in
    float32 for the 256 values of each channel, rounded once to ``dtype``, and looked up per
    pixel in one pass (the same bits as the formula per pixel).

    Args:
        images: uint8 batch (B, C, H, W).
        mean: One value per channel.
        std: One value per channel, each > 0.
        dtype: The output's floating-point dtype (float32, bfloat16, float16).
        channels_last: Give the output ``torch.channels_last`` memory format.

    Returns:
        (B, C, H, W) in ``dtype``.

    Raises:
        UserError: ``images`` not a uint8 (B, C, H, W) batch; ``mean`` or ``std`` not one
            finite value per channel, or a ``std`` <= 0.
    """
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
        kind = images.dtype if isinstance(images, torch.Tensor) else type(images).__name__
        raise UserTypeError(f"normalize: images must be a uint8 tensor (B, C, H, W), got {kind}: "
                            "normalize the uint8 pixels, once, as the last step")
    if images.ndim != 4:
        raise UserValueError(f"normalize: images must have shape (B, C, H, W), got "
                             f"{tuple(images.shape)}")
    if len(mean) != images.shape[1] or len(std) != images.shape[1]:
        raise UserValueError(
            f"mean and std need {images.shape[1]} values, got {len(mean)}, {len(std)}"
        )
    if not all(math.isfinite(v) for v in (*mean, *std)):
        raise UserValueError(f"normalize: mean and std must be finite numbers, got "
                             f"{list(mean)}, {list(std)} — pass per-channel statistics")
    if any(s <= 0 for s in std):
        raise UserValueError(f"std values must be positive, got {list(std)}")
    m = torch.tensor(mean, dtype=torch.float32)  # host values: the kernels copy what they need
    s = torch.tensor(std, dtype=torch.float32)
    return kernel("normalize", images)(images, m, s, dtype, channels_last)


# --- pixel augmentations (torchvision v2's names; kernels in _kernels.pixel / _kernels.blur) ---
def _per_sample(values: torch.Tensor | float | int, batch: int, name: str,
                dtype: torch.dtype) -> torch.Tensor:
    t = torch.as_tensor(values)
    if t.ndim == 0:
        t = t.expand(batch)
    if tuple(t.shape) != (batch,):
        raise UserValueError(f"{name} must be a number or have shape ({batch},), got "
                             f"{tuple(t.shape)}")
    if t.is_floating_point() and dtype != t.dtype and not dtype.is_floating_point:
        raise UserTypeError(f"{name} must hold integers, got {t.dtype}")
    return t.to(dtype)


def rgb_to_grayscale(images: torch.Tensor, sizes: torch.Tensor, mask: torch.Tensor
                     ) -> torch.Tensor:
    """Pillow's ``convert("L")`` (integer ITU-R 601-2 weights) for the samples in ``mask``,
    kept as 3 equal channels (torchvision's ``num_output_channels=3``; exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        mask: (B,) bool: which samples turn grey.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    m = _per_sample(mask, images.shape[0], "rgb_to_grayscale: mask", torch.bool)
    return kernel("rgb_to_grayscale", images)(images, sizes, m)  # type: ignore[no-any-return]


def erase(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
          value: int | Sequence[int] | torch.Tensor | str = 0,
          noise_seeds: torch.Tensor | None = None,
          noise: tuple[Sequence[float], Sequence[float]] | None = None) -> torch.Tensor:
    """torchvision's ``erase``: each sample's box set to ``value`` (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        boxes: (B, 4) int (top, left, height, width); height or width 0 erases nothing; a
            box past the sample's valid size is cut at it (torchvision's slicing: nothing
            is written into the padding).
        value: Levels 0..255: one for all, one per channel (3,), or per sample (B, 3); or
            ``"random"``: per-pixel normal noise keyed by ``noise_seeds``
            (``transforms.noise``; torchvision's ``value="random"``, in levels).
        noise_seeds: (B,) int64 in [0, 2**32): each sample's noise seed (``"random"`` only).
        noise: ``(mean, std)`` of the noise as fractions of 255 per channel: the
            ``Normalize`` that follows makes it standard normal (None: ImageNet's, the
            ``Normalize()`` default).

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, a host value outside 0..255, or
            ``"random"`` without ``noise_seeds``.
    """
    _check_images(images, sizes)
    b = images.shape[0]
    if tuple(boxes.shape) != (b, 4):
        raise UserValueError(f"erase: boxes must have shape ({b}, 4) (top, left, height, "
                             f"width), got {tuple(boxes.shape)}")
    boxes = _clip_boxes(boxes, sizes, images.device)
    if isinstance(value, str):
        return _erase_noise(images, sizes, boxes, value, noise_seeds, noise)
    v = torch.as_tensor(value)
    if v.ndim == 0:
        v = v.expand(3)
    if v.ndim == 1 and v.shape[0] == 3:
        v = v.view(1, 3).expand(b, 3)
    if tuple(v.shape) != (b, 3):
        raise UserValueError(f"erase: value must be a level, 3 levels or ({b}, 3), got shape "
                             f"{tuple(v.shape)}")
    if _kernels.host_values(v) and bool(((v < 0) | (v > 255)).any()):
        raise UserValueError(f"erase: value levels must lie in 0..255, got {v.unique().tolist()}"
                             " — pass uint8 levels, not normalised floats")
    return kernel("erase", images)(images, sizes, boxes, v)  # type: ignore[no-any-return]



def _clip_boxes(boxes: torch.Tensor, sizes: torch.Tensor, device: torch.device
                ) -> torch.Tensor:
    """``boxes`` (top, left, height, width) cut at each sample's valid size, as torchvision's
    slicing cuts them at the image: a box past it never writes into the padding (ops on the
    host where both are host tensors, else on ``device``, the images', nothing read back)."""
    where = torch.device("cpu") if _kernels.on_host(boxes, sizes) else device  # host: there
    bx = _kernels.to_device(boxes, where).to(torch.int64)
    sz = _kernels.to_device(sizes, where).to(torch.int64)
    start = bx[:, :2]
    side = (torch.minimum(start + bx[:, 2:], sz) - start).clamp(min=0)
    return torch.cat([start, side], 1)


def _erase_noise(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, value: str,
                 seeds: torch.Tensor | None,
                 noise: tuple[Sequence[float], Sequence[float]] | None) -> torch.Tensor:
    from npu_data.transforms.noise import IMAGENET, level_tensor

    b = images.shape[0]
    if value != "random":
        raise UserValueError(f"erase: value={value!r} is not offered — pass levels 0..255 or "
                             "'random' (with noise_seeds)")
    if not isinstance(seeds, torch.Tensor) or tuple(seeds.shape) != (b,) or \
            seeds.dtype != torch.int64:
        got = tuple(seeds.shape) if isinstance(seeds, torch.Tensor) else seeds
        raise UserValueError(f"erase: value='random' needs noise_seeds, a ({b},) int64 tensor "
                             f"in [0, 2**32) (RandomErasing draws them), got {got!r}")
    if _kernels.host_values(seeds) and bool(((seeds < 0) | (seeds >= 1 << 32)).any()):
        raise UserValueError("erase: noise_seeds must lie in [0, 2**32)")
    try:
        mean, std = (tuple(float(v) for v in part)
                     for part in (noise or IMAGENET))
    except (TypeError, ValueError):
        mean, std = (), ()
    if len(mean) != 3 or len(std) != 3:
        raise UserValueError(f"erase: noise must be (3 means, 3 stds), got {noise!r}")
    table = level_tensor(mean, std, images.device)
    return kernel("erase_noise", images)(images, sizes, boxes,  # type: ignore[no-any-return]
                                         seeds, table)

def posterize(images: torch.Tensor, sizes: torch.Tensor, bits: torch.Tensor | int
              ) -> torch.Tensor:
    """``ImageOps.posterize``: keep each level's ``bits`` high bits (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        bits: (B,) or one int in 0..8.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or host bits outside 0..8.
    """
    _check_images(images, sizes)
    n = _per_sample(bits, images.shape[0], "posterize: bits", torch.int64)
    if _kernels.host_values(n) and bool(((n < 0) | (n > 8)).any()):
        raise UserValueError(f"posterize: bits must lie in 0..8, got {n.unique().tolist()}")
    return kernel("lut_op", images)(images, sizes, "posterize", n)  # type: ignore[no-any-return]


def solarize(images: torch.Tensor, sizes: torch.Tensor, threshold: torch.Tensor | float
             ) -> torch.Tensor:
    """``ImageOps.solarize``: levels at or above ``threshold`` inverted (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        threshold: (B,) or one number, in levels (0..255 scale).

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    t = _per_sample(threshold, images.shape[0], "solarize: threshold", torch.float32)
    return kernel("lut_op", images)(images, sizes, "solarize", t)  # type: ignore[no-any-return]


def invert(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``ImageOps.invert``: ``255 - level`` (exact; padding 0).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    return kernel("lut_op", images)(images, sizes, "invert")  # type: ignore[no-any-return]


def equalize(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``ImageOps.equalize`` per sample and channel, histograms over the valid region only
    (exact; padding 0).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    return kernel("lut_op", images)(images, sizes, "equalize")  # type: ignore[no-any-return]


def autocontrast(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``ImageOps.autocontrast`` (no cutoff) per sample and channel, from the valid region's
    lowest and highest levels (exact; padding 0).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    return kernel("lut_op", images)(images, sizes, "autocontrast")  # type: ignore[no-any-return]


def adjust_sharpness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                     ) -> torch.Tensor:
    """``ImageEnhance.Sharpness(factor)`` per sample: blend with Pillow's ``SMOOTH`` filter of
    the valid image (its 1-px border kept), float32 and truncated as Pillow (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        factors: (B,) or a scalar, >= 0: 1 leaves a sample as it is, 0 gives the smoothed one.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a negative host factor.
    """
    f = _enhance_factors(images, sizes, factors, "sharpness")
    return kernel("adjust_sharpness", images)(images, sizes, f)  # type: ignore[no-any-return]


def _kernel_size(kernel_size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(kernel_size, int):
        ks: tuple[object, ...] = (kernel_size, kernel_size)
    elif isinstance(kernel_size, Sequence) and not isinstance(kernel_size, str):
        ks = tuple(kernel_size)
    else:  # a float, a string: never iterated
        ks = ()
    ints = [k for k in ks if isinstance(k, int) and not isinstance(k, bool)]
    if len(ks) != 2 or len(ints) != 2:
        raise UserTypeError(f"gaussian_blur: kernel_size must be an int or (kx, ky) ints, got "
                            f"{kernel_size!r}")
    if any(k < 1 or k % 2 == 0 for k in ints):
        raise UserValueError(f"gaussian_blur: kernel_size must be odd and positive, got "
                             f"{kernel_size!r} — e.g. kernel_size=23")
    return ints[0], ints[1]


def gaussian_blur(images: torch.Tensor, sizes: torch.Tensor, kernel_size: int | Sequence[int],
                  sigma: torch.Tensor | float) -> torch.Tensor:
    """torchvision's ``gaussian_blur`` (its PIL path: a float32 convolution, reflect padding,
    rounding), each sample reflected inside its valid image; within 1 level of it.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        kernel_size: Odd ``(kx, ky)`` (width first, as torchvision) or one int.
        sigma: (B,) or one number > 0, the same on both axes.

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape, an even or non-positive kernel size,
            or a host sigma <= 0.
    """
    _check_images(images, sizes)
    ks = _kernel_size(kernel_size)
    s = _per_sample(sigma, images.shape[0], "gaussian_blur: sigma", torch.float32)
    if _kernels.host_values(s) and not bool((s > 0).all()):
        raise UserValueError(f"gaussian_blur: sigma must be > 0, got {s.min().item()}")
    return kernel("gaussian_blur", images)(images, sizes, ks, s)  # type: ignore[no-any-return]


def permute_channels(images: torch.Tensor, sizes: torch.Tensor, permutation: torch.Tensor
                     ) -> torch.Tensor:
    """torchvision's ``permute_channels`` per sample: output channel ``c`` is input channel
    ``permutation[b, c]`` (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W).
        sizes: (B, 2) valid (height, width) of each sample.
        permutation: (B, 3) int, each row a permutation of 0, 1, 2.

    Returns:
        (B, 3, H, W) uint8.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a host row that is no permutation.
    """
    _check_images(images, sizes)
    b = images.shape[0]
    if tuple(permutation.shape) != (b, 3):
        raise UserValueError(f"permute_channels: permutation must have shape ({b}, 3), got "
                             f"{tuple(permutation.shape)}")
    if _kernels.host_values(permutation) and not bool(
            (permutation.sort(1).values == torch.arange(3)).all()):
        raise UserValueError("permute_channels: each row must be a permutation of 0, 1, 2")
    return kernel("permute_channels", images)(  # type: ignore[no-any-return]
        images, sizes, permutation)


def choose(mask: torch.Tensor, images: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """Per sample, ``images`` where ``mask`` is set and ``others`` elsewhere (a random op
    applied to some samples only).

    Args:
        mask: (B,) bool.
        images: (B, ...) tensor.
        others: A tensor of the same shape and dtype.

    Returns:
        (B, ...) like ``images``.

    Raises:
        UserError: Shapes or dtypes that differ, or a mask of the wrong shape.
    """
    if images.shape != others.shape or images.dtype != others.dtype:
        raise UserValueError(f"choose: images and others must match, got {tuple(images.shape)} "
                             f"{images.dtype} and {tuple(others.shape)} {others.dtype}")
    if tuple(mask.shape) != (images.shape[0],):
        raise UserValueError(f"choose: mask must have shape ({images.shape[0]},), got "
                             f"{tuple(mask.shape)}")
    return kernel("choose", images)(mask, images, others)  # type: ignore[no-any-return]


def _check_pairs(images: torch.Tensor, partner: torch.Tensor, who: str) -> None:
    b = images.shape[0] if isinstance(images, torch.Tensor) and images.ndim == 4 else -1
    if b < 0:
        raise UserValueError(f"{who}: images must be a (B, C, H, W) tensor")
    if tuple(partner.shape) != (b,):
        raise UserValueError(f"{who}: partner must have shape ({b},), got {tuple(partner.shape)}")
    if _kernels.host_values(partner) and bool(((partner < 0) | (partner >= b)).any()):
        raise UserValueError(f"{who}: partner indices must lie in 0..{b - 1}")


def mixup(images: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """MixUp's pixels: ``partner * (1 - lam) + x * lam`` per sample, float32 (torchvision's
    order); uint8 batches rounded half to even, float batches kept in their dtype.

    Args:
        images: (B, C, H, W) uint8 or float batch of samples of one size.
        partner: (B,) int: the index of each sample's partner.
        lam: (B,) float: each sample's own weight.

    Returns:
        (B, C, H, W) like ``images``.

    Raises:
        UserError: Shapes that do not match, or host partner indices out of range.
    """
    _check_pairs(images, partner, "mixup")
    w = _per_sample(lam, images.shape[0], "mixup: lam", torch.float32)
    return kernel("mixup", images)(images, partner, w)  # type: ignore[no-any-return]


def cutmix(images: torch.Tensor, partner: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """CutMix's pixels: each sample's box copied from its partner (the same place).

    Args:
        images: (B, C, H, W) batch of samples of one size.
        partner: (B,) int: the index of each sample's partner.
        boxes: (B, 4) int (top, left, height, width).

    Returns:
        (B, C, H, W) like ``images``.

    Raises:
        UserError: Shapes that do not match, or host partner indices out of range.
    """
    _check_pairs(images, partner, "cutmix")
    if tuple(boxes.shape) != (images.shape[0], 4):
        raise UserValueError(f"cutmix: boxes must have shape ({images.shape[0]}, 4), got "
                             f"{tuple(boxes.shape)}")
    return kernel("cutmix", images)(images, partner, boxes)  # type: ignore[no-any-return]


def soft_labels(labels: torch.Tensor, partner: torch.Tensor, weight: torch.Tensor,
                num_classes: int | None) -> torch.Tensor:
    """MixUp / CutMix targets: ``weight`` of each sample's one-hot row plus ``1 - weight`` of
    its partner's.

    Args:
        labels: (B,) int class ids, or (B, classes) float rows when ``num_classes`` is None.
        partner: (B,) int: the index of each sample's partner.
        weight: (B,) float: each sample's own share.
        num_classes: The row length for class ids; None for rows given.

    Returns:
        (B, classes) float32.

    Raises:
        UserError: Labels of the wrong shape or dtype, or host class ids out of range.
    """
    b = labels.shape[0] if labels.ndim else -1
    if num_classes is None:
        if labels.ndim != 2 or not labels.is_floating_point():
            raise UserValueError(f"soft_labels: without num_classes the labels must be "
                                 f"(B, classes) float, got {tuple(labels.shape)} "
                                 f"{labels.dtype} — pass num_classes=")
    else:
        if labels.ndim != 1 or labels.is_floating_point():
            raise UserValueError(f"soft_labels: labels must be (B,) class ids, got "
                                 f"{tuple(labels.shape)} {labels.dtype}")
        if _kernels.host_values(labels) and bool(((labels < 0) | (labels >= num_classes)).any()):
            raise UserValueError(f"soft_labels: class ids must lie in 0..{num_classes - 1}, got "
                                 f"{labels.min().item()}..{labels.max().item()} — check "
                                 "num_classes")
    if tuple(partner.shape) != (b,):
        raise UserValueError(f"soft_labels: partner must have shape ({b},), got "
                             f"{tuple(partner.shape)}")
    w = _per_sample(weight, b, "soft_labels: weight", torch.float32)
    return kernel("soft_labels", labels)(  # type: ignore[no-any-return]
        labels, partner, w, num_classes)


def policy_step(images: torch.Tensor, sizes: torch.Tensor, ops: torch.Tensor,
                factors: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """One auto-augment op per sample, batched (the pixel ops; geometric ids leave their
    samples as they are).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        ops: (B,) int ids into ``POLICY_OPS``.
        factors: (B,) float: ``1 + magnitude`` for Brightness, Color, Contrast, Sharpness.
        levels: (B,) int: Posterize bits, or the Solarize threshold rounded up to a level.

    Returns:
        (B, 3, H, W) uint8, each sample as torchvision's PIL op makes it (exact); padding 0.

    Raises:
        UserError: Tensors of the wrong dtype or shape, or host op ids out of range.
    """
    _check_images(images, sizes)
    b = images.shape[0]
    o = _per_sample(ops, b, "policy_step: ops", torch.int64)
    if _kernels.host_values(o) and bool(((o < 0) | (o >= len(POLICY_OPS))).any()):
        raise UserValueError(f"policy_step: op ids must lie in 0..{len(POLICY_OPS) - 1}")
    f = _checked_nonneg(factors, images, "policy_step")
    n = _per_sample(levels, b, "policy_step: levels", torch.int64)
    return kernel("policy_step", images)(images, sizes, o, f, n)  # type: ignore[no-any-return]


def vflip(images: torch.Tensor, sizes: torch.Tensor, flip_mask: torch.Tensor) -> torch.Tensor:
    """Mirror each flagged sample top-bottom within its valid height (exact).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        flip_mask: (B,) bool: which samples to mirror.

    Returns:
        (B, 3, H, W) uint8, padding left as 0.

    Raises:
        UserError: A tensor of the wrong dtype or shape.
    """
    _check_images(images, sizes)
    if tuple(flip_mask.shape) != (images.shape[0],):
        raise UserValueError(f"vflip: flip_mask must have shape ({images.shape[0]},), got "
                             f"{tuple(flip_mask.shape)}")
    return kernel("vflip", images)(images, sizes, flip_mask)  # type: ignore[no-any-return]


def _host_rows(t: torch.Tensor | Sequence[float], batch: int, shape: tuple[int, ...],
               name: str, who: str) -> np.ndarray:
    """A per-sample parameter as float64 host values (the maps are made on the host)."""
    if isinstance(t, torch.Tensor) and not t.is_cpu:
        raise UserValueError(f"{who}: {name} must be a host (CPU) tensor — the inverse maps are "
                             "made on the host in float64 as Pillow makes them")
    host = (t.detach() if t.requires_grad else t).numpy() if isinstance(t, torch.Tensor) else t
    a = np.asarray(host, dtype=np.float64)
    if a.ndim == len(shape) - 1:  # one value for every sample
        a = np.broadcast_to(a, (batch, *shape[1:]))
    if a.shape != (batch, *shape[1:]):
        raise UserValueError(f"{who}: {name} must have shape {(batch, *shape[1:])}, got "
                             f"{a.shape}")
    if not np.isfinite(a).all():
        raise UserValueError(f"{who}: {name} must be finite, got {a.tolist()}")
    return a


def _warp_args(images: torch.Tensor, sizes: torch.Tensor, matrices: np.ndarray,
               interpolation: str, fill: int | Sequence[int], out_sizes: np.ndarray | None,
               out_shape: tuple[int, int] | None, who: str) -> tuple[object, ...]:
    """The ``warp`` kernel's arguments: the host tables of ``matrices`` (see :func:`warp`)."""
    check_warp_interpolation(interpolation, who)
    fill_rgb = torch.tensor(check_fill(fill, who), dtype=torch.uint8)
    b = images.shape[0]
    oh, ow = out_shape if out_shape is not None else (images.shape[2], images.shape[3])
    if oh < 1 or ow < 1:
        raise UserValueError(f"{who}: the output must be at least 1x1, got {oh}x{ow}")
    if _kernels.host_values(sizes):  # a warp reads at least one source pixel of each sample
        _check_sizes(sizes, images.shape[2], images.shape[3], 1)
    m = np.asarray(matrices, dtype=np.float64).reshape(b, 6)
    if interpolation == "bilinear":
        tabs = warp_tables.bilinear_tables(m, oh, ow)
    else:
        tabs = warp_tables.nearest_tables(m, oh, ow)
    osz = sizes if out_sizes is None else torch.from_numpy(
        np.asarray(out_sizes, dtype=np.int64).reshape(b, 2))
    return (images, sizes, osz, tuple(torch.from_numpy(t) for t in tabs),
            interpolation == "bilinear", fill_rgb)


def warp(images: torch.Tensor, sizes: torch.Tensor, matrices: np.ndarray,
         interpolation: str = "nearest", fill: int | Sequence[int] = 0,
         out_sizes: np.ndarray | None = None, out_shape: tuple[int, int] | None = None
         ) -> torch.Tensor:
    """Pillow's ``Image.transform(AFFINE)`` of each sample with its own inverse map.

    Nearest is exact (Pillow's fixed-point and scale paths, tabulated on the host); bilinear
    reads the source point Pillow computes in double, rounded to 2**-32 px, and
    interpolates exactly in integers: within one level of Pillow, which rounds in double.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        matrices: (B, 6) float64 host array: Pillow's coefficients (output pixel centre to
            source point) per sample (``npu_data.transforms.maps``).
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill: The colour where a point falls outside the source (int or three ints).
        out_sizes: (B, 2) valid output sizes (None: ``sizes``).
        out_shape: The output batch (height, width) (None: the input's).

    Returns:
        (B, 3, h, w) uint8, 0 outside each sample's output size.

    Raises:
        UserError: A tensor of the wrong dtype or shape, a bad interpolation or fill.
    """
    _check_images(images, sizes)
    args = _warp_args(images, sizes, matrices, interpolation, fill, out_sizes, out_shape, "warp")
    return kernel("warp", images)(*args)  # type: ignore[no-any-return]


def _host_sizes(sizes: torch.Tensor, who: str) -> np.ndarray:
    if not sizes.is_cpu:
        raise UserValueError(f"{who}: sizes must be a host (CPU) tensor here — each sample's "
                             "centre enters its inverse map, made on the host")
    return sizes.numpy().astype(np.int64).reshape(-1, 2)


def affine(images: torch.Tensor, sizes: torch.Tensor, angle: torch.Tensor,
           translate: torch.Tensor, scale: torch.Tensor, shear: torch.Tensor,
           interpolation: str = "nearest", fill: int | Sequence[int] = 0) -> torch.Tensor:
    """torchvision's ``affine`` per sample, about each valid image's centre (size kept).

    Pillow's ``Image.transform`` with torchvision's inverse map: exact for nearest, within
    one level for bilinear (see :func:`warp`).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) host tensor: valid (height, width) of each sample.
        angle: (B,) rotation in degrees (torchvision's sign: clockwise on screen).
        translate: (B, 2) (tx, ty) in pixels.
        scale: (B,) scale factors, > 0.
        shear: (B, 2) (sx, sy) shear angles in degrees.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill: The colour of pixels mapped from outside the image (int or three ints).

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype, shape or device, a non-finite parameter, a
            scale <= 0, a bad interpolation or fill.
    """
    _check_images(images, sizes)
    b, who = images.shape[0], "affine"
    a = _host_rows(angle, b, (b,), "angle", who)
    t = _host_rows(translate, b, (b, 2), "translate", who)
    s = _host_rows(scale, b, (b,), "scale", who)
    sh = _host_rows(shear, b, (b, 2), "shear", who)
    if (s <= 0).any():
        raise UserValueError(f"affine: scale must be positive, got {s.tolist()}")
    m = maps.affine_matrices(_host_sizes(sizes, who), a, t, s, sh)
    args = _warp_args(images, sizes, m, interpolation, fill, None, None, who)
    return kernel("warp", images)(*args)  # type: ignore[no-any-return]


def rotate(images: torch.Tensor, sizes: torch.Tensor, angle: torch.Tensor,
           interpolation: str = "nearest", fill: int | Sequence[int] = 0) -> torch.Tensor:
    """Pillow's ``Image.rotate(angle)`` per sample (torchvision's ``rotate``, ``expand=False``).

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) host tensor: valid (height, width) of each sample.
        angle: (B,) degrees, counter-clockwise.
        interpolation: ``"nearest"`` (exact) or ``"bilinear"`` (within one level).
        fill: The colour of the uncovered corners (int or three ints).

    Returns:
        (B, 3, H, W) uint8, padding 0.

    Raises:
        UserError: A tensor of the wrong dtype, shape or device, a bad interpolation or fill.
    """
    _check_images(images, sizes)
    who = "rotate"
    a = _host_rows(angle, images.shape[0], (images.shape[0],), "angle", who)
    m = maps.rotate_matrices(_host_sizes(sizes, who), a)
    args = _warp_args(images, sizes, m, interpolation, fill, None, None, who)
    return kernel("warp", images)(*args)  # type: ignore[no-any-return]


def crop(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """torchvision's ``crop`` per sample: the box ``(top, left, height, width)`` of each image
    to its top-left, nothing resized (exact). The boxes may be on the images' device (a crop
    chosen there): the kernel reads nothing back.

    Args:
        images: Padded uint8 batch (B, 3, H, W), each image at the top-left.
        sizes: (B, 2) valid (height, width) of each sample.
        boxes: (B, 4) int64 boxes inside each valid image (checked when on the host).

    Returns:
        (B, 3, H, W) uint8: each sample's box at the top-left (its new valid size the box's),
        0 elsewhere.

    Raises:
        UserError: A tensor of the wrong dtype or shape, or a host box outside its image.
    """
    _check_images(images, sizes)
    b = images.shape[0]
    if tuple(boxes.shape) != (b, 4) or boxes.is_floating_point():
        raise UserValueError(f"crop: boxes must be integers of shape ({b}, 4) (top, left, "
                             f"height, width), got {boxes.dtype} {tuple(boxes.shape)}")
    if _kernels.host_values(boxes) and _kernels.host_values(sizes):
        bx, sz = boxes.to(torch.int64), sizes.to(torch.int64)
        bad = (bx[:, :2] < 0).any(1) | (bx[:, 2:] < 1).any(1) | (bx[:, :2] + bx[:, 2:] > sz).any(1)
        if bool(bad.any()):
            i = int(bad.to(torch.int64).argmax())
            raise UserValueError(f"crop: box {bx[i].tolist()} of sample {i} is not inside its "
                                 f"{sz[i].tolist()} image (top, left, height, width)")
    dev = images.device
    bx = _kernels.to_device(boxes, dev).to(torch.int64)
    h, w = images.shape[2], images.shape[3]
    unit = 1 << warp_tables.NEAREST_SHIFT
    cols = torch.arange(w, device=dev).view(1, w)
    rows = torch.arange(h, device=dev).view(1, h)
    tables = ((cols + bx[:, 1:2]) * unit, torch.zeros(b, h, dtype=torch.int64, device=dev),
              torch.zeros(b, w, dtype=torch.int64, device=dev), (rows + bx[:, 0:1]) * unit)
    fill = torch.zeros(3, dtype=torch.uint8)
    return kernel("warp", images)(images, sizes, bx[:, 2:], tables,  # type: ignore[no-any-return]
                                  False, fill)


# --- a batch's host parameters in one copy to the device (issue 47) ---------------------------
# Not ops (no kernel runs): what a transform needs to hand the torch kernels their host-made
# parameters ahead, so that a pipeline's stages ride with its first host-to-device copy. No
# backend is picked here: riding happens where host tensors are copied (a device, or the host
# under ``_kernels.copies_on_host``), whichever kernel then runs; a view that does not hold
# the same values is never taken, so none of this changes a result.


def riding(host: Mapping[str, torch.Tensor]) -> AbstractContextManager[None]:
    """Within the block, the named host tensors ``host`` travel with the next copy of a
    batch's parameters to a device (``_kernels.riding``: one pinned buffer, one copy); a
    kernel, or :func:`take`, gets each back by name. Device tensors are left out; nothing
    rides inside a ``torch.compile`` trace."""
    return _kernels.riding(host)


def take(name: str, host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device``: the view that rode under ``name`` (:func:`riding`) when it
    holds the same values (compared on the host), else a queued copy carrying what rides."""
    return _kernels.take(name, host, device)


def copies_to(device: torch.device) -> bool:
    """Whether host parameters are copied to ``device`` (riders are worth making): not the
    host (unless ``_kernels.copies_on_host``), not inside a ``torch.compile`` trace."""
    return _kernels.copied(device)


def _full_sizes(b: int, height: int, width: int) -> torch.Tensor:
    """(B, 2) int64 host sizes of a batch every sample fills (one row per sample)."""
    return torch.tensor([[height, width]] * b, dtype=torch.int64).view(-1, 2)


def color_jitter_riders(shape: tuple[int, int, int], ops: Sequence[int],
                        order: torch.Tensor | None, brightness: torch.Tensor,
                        contrast: torch.Tensor, saturation: torch.Tensor, hue: torch.Tensor,
                        *, full: bool | None) -> dict[str, torch.Tensor]:
    """What :func:`color_jitter` (the torch kernel) copies for a ``(B, H, W)`` batch with
    these arguments: its steps' parameters and blend products, made on the host
    (``_kernels.jitter.host_parts``); empty where they are not host tensors or the padding is
    not known to be absent."""
    factors = torch.stack([brightness, contrast, saturation], 1)
    return _jitter.host_parts(shape, ops, order, factors, _color.hue_shift(hue), full)


def erase_riders(shape: tuple[int, int, int], boxes: torch.Tensor, value: torch.Tensor
                 ) -> dict[str, torch.Tensor]:
    """What :func:`erase` with one fill ``value`` (3,) uint8 copies for a ``(B, H, W)`` batch
    every sample fills: each box's rows and columns (cut at the image) and the fill
    (``_kernels.pixel.erase_parts``), made on the host."""
    b, height, width = shape
    host = torch.device("cpu")
    clipped = _clip_boxes(boxes, _full_sizes(b, height, width), host)
    fill = value.view(1, 3).expand(b, 3)
    return _pixel.erase_parts(clipped, fill, height, width, host)


def policy_choose_riders(ops: torch.Tensor) -> dict[str, torch.Tensor]:
    """The mask (B,) of the samples whose auto-augment op ``ops`` is geometric (``choose``
    takes their warped pixels), where ``ops`` are host values; else empty."""
    if not _kernels.on_host(ops):
        return {}
    return {"choose.mask": (ops >= 1) & (ops <= 5)}  # ShearX .. Rotate in POLICY_OPS


def policy_riders(shape: tuple[int, int, int], ops: torch.Tensor, factors: torch.Tensor,
                  levels: torch.Tensor, matrices: torch.Tensor, interpolation: str,
                  fill: int | Sequence[int], pixel_only: bool) -> dict[str, torch.Tensor]:
    """What one auto-augment step (:func:`policy_step`, then :func:`warp` and :func:`choose`
    for its geometric samples) copies for a ``(B, H, W)`` batch every sample fills: the
    step's host tables (``_kernels.pixel.host_step``), the smoothing masks where a sample
    sharpens, the warp's tables where one is geometric (``matrices`` (B, 6) its host maps);
    empty where ``ops`` are not host tensors."""
    if not _kernels.on_host(ops):
        return {}
    b, height, width = shape
    out = _pixel.host_step(ops, factors, levels, b, 3)
    out.update(policy_choose_riders(ops))
    geo = out["choose.mask"]
    sizes = _full_sizes(b, height, width)
    if bool((ops == POLICY_OPS.index("Sharpness")).any()) and height >= 3 and width >= 3:
        out.update(_pixel.smooth_parts(sizes, height, width, torch.device("cpu")))
    if not pixel_only and bool(geo.any()):
        shaped = torch.zeros(1, dtype=torch.uint8).expand(b, 3, height, width)  # a shape
        args = _warp_args(shaped, sizes, matrices.numpy(), interpolation, fill, None, None,
                          "warp")
        out.update(_warp.warp_parts(args[3], args[5], bool(args[4]),  # type: ignore[arg-type]
                                     (height, width)))
    return out


def soft_label_riders(partner: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """What :func:`soft_labels` copies: the partners, ``weight`` and ``1 - weight``
    (``_kernels.mixing.weights``), made where they live."""
    return _mixing.weights(partner, weight, "mix.label")
