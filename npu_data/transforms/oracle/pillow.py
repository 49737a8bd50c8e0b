"""The CPU versions: each op on one sample with Pillow + numpy (torchvision's PIL path).

A sample is an ``HxWx3`` uint8 numpy array of its valid size; every op returns a new
``HxWx3`` uint8 array, except ``normalize``, which returns float32 ``CxHxW`` (the layout of
one sample of the device batch) or ``HxWxC`` with ``channels_last=True``. Parameters are the
same as ``npu_data.transforms.functional`` takes per sample; these functions define what
the device kernels must reproduce (see ``npu_data.transforms.oracle.measures``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageEnhance

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.oracle.arguments import _check_factor, _check_image

__all__ = [
    "adjust_brightness",
    "adjust_sharpness",
    "autocontrast",
    "equalize",
    "erase",
    "gaussian_blur",
    "invert",
    "posterize",
    "rgb_to_grayscale",
    "solarize",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "hflip",
    "hue_shift",
    "normalize",
    "center_crop",
    "resize_shorter",
    "resized_crop",
    "resized_window",
]


def _out_size(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, bool):
        raise UserTypeError(f"reference.resized_crop: size must be an int or (height, width), "
                            f"got {size!r}")
    if isinstance(size, int | np.integer):
        h, w = int(size), int(size)
    elif isinstance(size, Sequence) and len(size) == 2:
        h, w = (int(s) for s in size)
    else:
        raise UserTypeError(f"reference.resized_crop: size must be an int or (height, width), "
                            f"got {size!r}")
    if h <= 0 or w <= 0:
        raise UserValueError(f"reference.resized_crop: size must be positive, got {size!r}")
    return h, w


_FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
            "lanczos": Image.Resampling.LANCZOS}


def _filter(interpolation: str, who: str) -> Image.Resampling:
    if not isinstance(interpolation, str) or interpolation not in _FILTERS:
        raise UserValueError(f"reference.{who}: interpolation must be one of "
                             f"{', '.join(repr(k) for k in _FILTERS)}, got {interpolation!r}")
    return _FILTERS[interpolation]


def resized_crop(img: np.ndarray, box: Sequence[int], size: int | Sequence[int],
                 interpolation: str = "bilinear") -> np.ndarray:
    """Crop a box and resize it with Pillow's filter (``Image.BILINEAR`` by default):
    torchvision's PIL ``resized_crop``.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        box: (top, left, height, width), inside the image and at least 1x1.
        size: The output (height, width), or one int for both.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"``.

    Returns:
        The resized crop, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, the box does not fit in it,
            ``size`` is not a positive int or pair, or ``interpolation`` is unknown.
    """
    img = _check_image(img, "resized_crop")
    resample = _filter(interpolation, "resized_crop")
    if len(box) != 4:
        raise UserValueError(f"reference.resized_crop: box must be (top, left, height, width), "
                             f"got {box!r}")
    top, left, height, width = (int(v) for v in box)
    ih, iw = img.shape[:2]
    if height < 1 or width < 1 or top < 0 or left < 0 or top + height > ih or left + width > iw:
        raise UserValueError(
            f"reference.resized_crop: box (top={top}, left={left}, height={height}, "
            f"width={width}) does not fit in the {ih}x{iw} image"
        )
    out_h, out_w = _out_size(size)
    crop = Image.fromarray(img).crop((left, top, left + width, top + height))
    return np.asarray(crop.resize((out_w, out_h), resample)).copy()


def resized_window(img: np.ndarray, box: Sequence[int], window: Sequence[int],
                   size: int | Sequence[int], interpolation: str = "bilinear") -> np.ndarray:
    """Resize a box whole, then keep a window of it: torchvision's PIL ``Resize`` then a crop.

    Outside the resized image (a negative offset, or a window past its end) the output is 0,
    as torchvision's ``CenterCrop`` pads.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        box: (top, left, height, width), inside the image and at least 1x1.
        window: (top, left, full_height, full_width): the box is resized to
            ``(full_height, full_width)`` with the filter and the output is kept at
            ``(top, left)`` of that.
        size: The output (height, width), or one int for both.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"``.

    Returns:
        The window, HxWx3 uint8.

    Raises:
        UserError: A window that is not four numbers or has a full size below 1, or what
            ``resized_crop`` rejects.
    """
    if len(window) != 4:
        raise UserValueError(f"reference.resized_window: window must be (top, left, full_height, "
                             f"full_width), got {window!r}")
    top, left, full_h, full_w = (int(v) for v in window)
    if full_h < 1 or full_w < 1:
        raise UserValueError(f"reference.resized_window: the full size must be positive, got "
                             f"{(full_h, full_w)}")
    resized = resized_crop(img, box, (full_h, full_w), interpolation)
    out_h, out_w = _out_size(size)
    out = np.zeros((out_h, out_w, 3), np.uint8)
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + out_h, full_h), min(left + out_w, full_w)
    if y1 > y0 and x1 > x0:
        out[y0 - top:y1 - top, x0 - left:x1 - left] = resized[y0:y1, x0:x1]
    return out


def resize_shorter(img: np.ndarray, size: int, max_size: int | None = None,
                   interpolation: str = "bilinear") -> np.ndarray:
    """torchvision's PIL ``Resize(size, max_size)`` with Pillow's filter (``Image.BILINEAR``
    by default).

    The shorter side becomes ``size``, the longer ``int(size * long / short)`` (torchvision
    0.28 transforms/functional.py 353-384; no resize when the size is unchanged, 470-476).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        size: The shorter side's new length.
        max_size: The longest the longer side may be (both sides shrink to fit); None: no
            bound.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"``.

    Returns:
        The resized image, HxWx3 uint8 (a copy).

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``interpolation`` is
            unknown.
    """
    img = _check_image(img, "resize_shorter")
    resample = _filter(interpolation, "resize_shorter")
    h, w = img.shape[:2]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = int(size), int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), int(max_size)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_h, new_w) == (h, w):
        return img.copy()
    return np.asarray(Image.fromarray(img).resize((new_w, new_h), resample)).copy()


def center_crop(img: np.ndarray, size: int | Sequence[int]) -> np.ndarray:
    """torchvision's PIL ``CenterCrop``.

    Pads with 0 where the crop is larger (``(crop - side) // 2`` before), else crops at the
    offset ``int(round((side - crop) / 2))`` (torchvision 0.28
    transforms/v2/functional/_geometry.py 2564-2578, 2602-2616).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        size: The output (height, width), or one int for both.

    Returns:
        The crop, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``size`` is not a positive int
            or pair.
    """
    img = _check_image(img, "center_crop")
    crop_h, crop_w = _out_size(size)
    h, w = img.shape[:2]
    if crop_h > h or crop_w > w:
        top, left = max(crop_h - h, 0) // 2, max(crop_w - w, 0) // 2
        bottom, right = (max(crop_h - h, 0) + 1) // 2, (max(crop_w - w, 0) + 1) // 2
        img = np.pad(img, ((top, bottom), (left, right), (0, 0)))
        h, w = img.shape[:2]
    top = int(round((h - crop_h) / 2.0))
    left = int(round((w - crop_w) / 2.0))
    return img[top:top + crop_h, left:left + crop_w].copy()


def hflip(img: np.ndarray, flip: bool = True) -> np.ndarray:
    """Mirror left-right.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        flip: Whether to mirror (a copy either way).

    Returns:
        The image, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array.
    """
    img = _check_image(img, "hflip")
    return img[:, ::-1].copy() if bool(flip) else img.copy()


def _enhance(img: np.ndarray, enhancer: type[ImageEnhance._Enhance], factor: float,
             who: str) -> np.ndarray:
    img = _check_image(img, who)
    f = _check_factor(factor, who)
    return np.asarray(enhancer(Image.fromarray(img)).enhance(f)).copy()  # type: ignore[call-arg]


def adjust_brightness(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Brightness(img).enhance(factor)`` (blend with black).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        factor: >= 0; 1 leaves the image as it is.

    Returns:
        The adjusted image, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``factor`` is
            not a finite number >= 0.
    """
    return _enhance(img, ImageEnhance.Brightness, factor, "adjust_brightness")


def adjust_contrast(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Contrast(img).enhance(factor)`` (blend with the grayscale mean).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        factor: >= 0; 1 leaves the image as it is.

    Returns:
        The adjusted image, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``factor`` is
            not a finite number >= 0.
    """
    return _enhance(img, ImageEnhance.Contrast, factor, "adjust_contrast")


def adjust_saturation(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Color(img).enhance(factor)`` (blend with per-pixel grayscale).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        factor: >= 0; 1 leaves the image as it is.

    Returns:
        The adjusted image, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``factor`` is
            not a finite number >= 0.
    """
    return _enhance(img, ImageEnhance.Color, factor, "adjust_saturation")


def hue_shift(hue: float) -> int:
    """torchvision's ``np.array(hue * 255).astype(np.uint8)``, made deterministic.

    numpy's cast of a negative float to uint8 is undefined in C; on the platforms we run it
    truncates toward zero and wraps modulo 256, which is what this computes for every hue.

    Args:
        hue: The hue factor, in [-0.5, 0.5].

    Returns:
        The shift added to Pillow's 8-bit hue channel, 0..255.
    """
    return int(np.int64(np.trunc(hue * 255.0)) % 256)


def adjust_hue(img: np.ndarray, hue: float) -> np.ndarray:
    """torchvision's PIL ``adjust_hue``: Pillow HSV, ``H += uint8(hue * 255)`` wrapping, RGB.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        hue: The shift, in [-0.5, 0.5]; 0 still round-trips through HSV (not an exact
            identity).

    Returns:
        The adjusted image, HxWx3 uint8.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, or ``hue`` is outside [-0.5, 0.5].
    """
    img = _check_image(img, "adjust_hue")
    h_factor = _check_factor(hue, "adjust_hue", -0.5, 0.5)
    h, s, v = Image.fromarray(img).convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    np_h += np.uint8(hue_shift(h_factor))  # uint8 arithmetic wraps modulo 256
    merged = Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v))
    return np.asarray(merged.convert("RGB")).copy()


def normalize(img: np.ndarray, mean: Sequence[float], std: Sequence[float],
              channels_last: bool = False) -> np.ndarray:
    """``(img / 255 - mean) / std`` in float32.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        mean: Three values, one per channel.
        std: Three values, each > 0.
        channels_last: Return HxWxC instead of CxHxW (the layout of one sample of the device
            batch).

    Returns:
        float32 CxHxW (default) or HxWxC.

    Raises:
        UserError: ``img`` is not a non-empty HxWx3 uint8 array, ``mean`` or ``std`` is not
            three values, or a ``std`` is not > 0.
    """
    img = _check_image(img, "normalize")
    if len(mean) != 3 or len(std) != 3:
        raise UserValueError(f"reference.normalize: mean and std need 3 values, got {len(mean)} "
                             f"and {len(std)}")
    if any(not float(s) > 0 for s in std):
        raise UserValueError(f"reference.normalize: std values must be > 0, got {list(std)}")
    m = np.asarray(mean, dtype=np.float32)
    s = np.asarray(std, dtype=np.float32)
    out = (img.astype(np.float32) / np.float32(255.0) - m) / s
    out = out.astype(np.float32)
    return out if channels_last else np.ascontiguousarray(out.transpose(2, 0, 1))


from npu_data.transforms.oracle.pillow_pixel import (  # noqa: E402  (the pixel augmentations)
    adjust_sharpness,
    autocontrast,
    equalize,
    erase,
    gaussian_blur,
    invert,
    posterize,
    rgb_to_grayscale,
    solarize,
)
