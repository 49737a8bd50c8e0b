"""The CPU versions of the pixel augmentations (torchvision 0.29's PIL path), one sample each.

Same conventions as :mod:`npu_data.transforms.oracle.pillow` (which re-exports these): a sample is
an ``HxWx3`` uint8 array of its valid size and every op returns a new one. Pillow does the work
where torchvision's PIL kernels call Pillow (grayscale, posterize, solarize, equalize,
autocontrast, invert, sharpness); ``erase`` and ``gaussian_blur`` follow torchvision's PIL
path, which converts to a tensor and back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.oracle.arguments import _check_factor, _check_image


def _check(img: np.ndarray, who: str) -> np.ndarray:
    return _check_image(img, who)


def _pil(img: np.ndarray) -> Image.Image:
    return Image.fromarray(img)


def rgb_to_grayscale(img: np.ndarray) -> np.ndarray:
    """Pillow's ``convert("L")`` copied into 3 channels (torchvision, ``num_output_channels=3``).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).

    Returns:
        HxWx3 uint8, the three channels equal.
    """
    grey = np.asarray(_pil(_check(img, "rgb_to_grayscale")).convert("L"))
    return np.repeat(grey[:, :, None], 3, axis=2)


def erase(img: np.ndarray, box: Sequence[int], value: Sequence[int] | int | str,
          seed: int | None = None,
          noise: tuple[Sequence[float], Sequence[float]] | None = None) -> np.ndarray:
    """torchvision's ``erase``: the ``box`` (top, left, height, width) set to ``value``.

    Args:
        img: One sample, HxWx3 uint8.
        box: The region; clipped to the image (height or width 0: nothing erased).
        value: One level, or one per channel (0..255); or ``"random"``: each pixel's keyed
            noise level (``transforms.noise``) from ``seed``, over the box alone.
        seed: The sample's noise seed in [0, 2**32) (``"random"`` only).
        noise: ``(mean, std)`` of the noise as fractions of 255 (None: ImageNet's).

    Returns:
        HxWx3 uint8.

    Raises:
        UserValueError: A negative box entry, or ``"random"`` without a seed.
    """
    out = _check(img, "erase").copy()
    top, left, h, w = (int(v) for v in box)
    if min(top, left, h, w) < 0:
        raise UserValueError(f"reference.erase: box must be non-negative (top, left, height, "
                             f"width), got {list(box)}")
    if not isinstance(value, str):
        out[top:top + h, left:left + w] = np.asarray(value, dtype=np.uint8)
        return out
    from npu_data.transforms.noise import IMAGENET, SEEDS, level_table, noise_index

    if value != "random" or seed is None or not 0 <= int(seed) < SEEDS:
        raise UserValueError(f"reference.erase: value={value!r} needs value='random' and a "
                             f"seed in [0, 2**32), got seed={seed!r}")
    mean, std = noise or IMAGENET
    table = level_table(mean, std)
    region = out[top:top + h, left:left + w]  # a view: clipped to the image
    rows = np.arange(top, top + region.shape[0], dtype=np.int64)[:, None]
    cols = np.arange(left, left + region.shape[1], dtype=np.int64)[None, :]
    for c in range(3):
        region[:, :, c] = table[c, noise_index(np.int64(seed), np.int64(c), rows, cols)]
    return out


def posterize(img: np.ndarray, bits: int) -> np.ndarray:
    """``ImageOps.posterize``: keep the ``bits`` high bits of each level (Pillow refuses 0,
    which torchvision's tensor kernel maps to black: so does this).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        bits: 0..8.

    Returns:
        HxWx3 uint8.

    Raises:
        UserValueError: ``bits`` outside 0..8.
    """
    if not 0 <= int(bits) <= 8:
        raise UserValueError(f"reference.posterize: bits must be in 0..8, got {bits!r}")
    img = _check(img, "posterize")
    if int(bits) == 0:
        return np.zeros_like(img)
    return np.asarray(ImageOps.posterize(_pil(img), int(bits))).copy()


def solarize(img: np.ndarray, threshold: float) -> np.ndarray:
    """``ImageOps.solarize``: levels at or above ``threshold`` inverted.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        threshold: In levels (torchvision passes ``255 * magnitude``).

    Returns:
        HxWx3 uint8.
    """
    # torchvision passes a float threshold (255 * magnitude); Pillow compares levels with it
    out = ImageOps.solarize(_pil(_check(img, "solarize")), threshold)  # type: ignore[arg-type]
    return np.asarray(out).copy()


def invert(img: np.ndarray) -> np.ndarray:
    """``ImageOps.invert``: ``255 - level``.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).

    Returns:
        HxWx3 uint8.
    """
    return np.asarray(ImageOps.invert(_pil(_check(img, "invert")))).copy()


def equalize(img: np.ndarray) -> np.ndarray:
    """``ImageOps.equalize``: each channel's histogram equalised (Pillow's integer steps).

    Args:
        img: One sample, HxWx3 uint8 (its valid region).

    Returns:
        HxWx3 uint8.
    """
    return np.asarray(ImageOps.equalize(_pil(_check(img, "equalize")))).copy()


def autocontrast(img: np.ndarray) -> np.ndarray:
    """``ImageOps.autocontrast`` (no cutoff): each channel stretched to 0..255.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).

    Returns:
        HxWx3 uint8.
    """
    return np.asarray(ImageOps.autocontrast(_pil(_check(img, "autocontrast")))).copy()


def adjust_sharpness(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Sharpness(img).enhance(factor)``: blend with Pillow's ``SMOOTH`` filter.

    Args:
        img: One sample, HxWx3 uint8 (its valid region).
        factor: >= 0; 1 leaves the image as it is, 0 gives the smoothed one.

    Returns:
        HxWx3 uint8.
    """
    f = _check_factor(factor, "adjust_sharpness")
    out = ImageEnhance.Sharpness(_pil(_check(img, "adjust_sharpness"))).enhance(f)
    return np.asarray(out).copy()


def gaussian_kernel1d(kernel_size: int, sigma: float) -> torch.Tensor:
    """torchvision v2's 1-D Gaussian: ``softmax(-x**2)`` over ``kernel_size`` float32 points
    in ``[-lim, lim]``, ``lim = (kernel_size - 1) / (2 sqrt(2) sigma)``."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0) * sigma)
    x = torch.linspace(-lim, lim, steps=kernel_size, dtype=torch.float32)
    return torch.softmax(x.pow(2).neg(), dim=0)


def gaussian_blur(img: np.ndarray, kernel_size: Sequence[int] | int, sigma: float) -> np.ndarray:
    """torchvision's PIL ``gaussian_blur``: a float32 2-D convolution of the reflect-padded
    image with the outer product of two :func:`gaussian_kernel1d`, rounded half to even (the
    sum taken tap by tap in numpy, so no matmul precision setting reaches it).

    Args:
        img: One sample, HxWx3 uint8.
        kernel_size: Odd positive ``(kx, ky)`` (width first, as torchvision), or one int.
        sigma: > 0, both axes.

    Returns:
        HxWx3 uint8. Images narrower than half the kernel (where torch's reflect padding
        refuses) reflect again at each edge, as numpy's ``reflect`` mode.

    Raises:
        UserValueError: An even or non-positive kernel size.
        UserTypeError: A sigma that is not a number > 0.
    """
    img = _check(img, "gaussian_blur")
    kx, ky = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    if kx < 1 or ky < 1 or kx % 2 == 0 or ky % 2 == 0:
        raise UserValueError(f"reference.gaussian_blur: kernel_size must be odd and positive, "
                             f"got {kernel_size!r}")
    if not (isinstance(sigma, int | float) and sigma > 0):
        raise UserTypeError(f"reference.gaussian_blur: sigma must be a number > 0, got {sigma!r}")
    k2 = gaussian_kernel1d(ky, sigma).unsqueeze(-1) * gaussian_kernel1d(kx, sigma)
    padded = np.pad(img.astype(np.float32), ((ky // 2, ky // 2), (kx // 2, kx // 2), (0, 0)),
                    mode="reflect")
    weights = k2.numpy()
    h, w = img.shape[:2]
    acc = np.zeros((h, w, 3), np.float32)
    for i in range(ky):
        for j in range(kx):
            acc += padded[i:i + h, j:j + w] * weights[i, j]
    return np.rint(acc).clip(0, 255).astype(np.uint8)
