"""The CPU versions of the geometric ops, one sample each, as torchvision's PIL kernels run them.

``affine`` is torchvision's ``_affine_image_pil``: the inverse map of
``_get_inverse_affine_matrix`` about the image centre, then Pillow's
``Image.transform(AFFINE, fillcolor=fill)``; ``rotate`` is Pillow's ``Image.rotate``;
``vflip`` mirrors rows; ``pad`` places the image on a filled canvas (``RandomZoomOut``);
``crop`` cuts a window (``RandomIoUCrop``). Images are ``HxWx3`` uint8 arrays of the valid
size, as in :mod:`npu_data.transforms.oracle.pillow`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from PIL import Image

from npu_data.errors import UserValueError
from npu_data.transforms.maps import affine_matrix, check_fill, check_interpolation
from npu_data.transforms.oracle.arguments import _check_image

__all__ = ["affine", "crop", "pad", "rotate", "vflip"]

_PIL = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR}


def affine(img: np.ndarray, angle: float, translate: Sequence[float], scale: float,
           shear: Sequence[float], interpolation: str = "nearest",
           fill: int | Sequence[int] = 0) -> np.ndarray:
    """torchvision's ``affine`` on a PIL image (centre of the image, size kept).

    Args:
        img: One sample, HxWx3 uint8.
        angle: Rotation in degrees (clockwise on screen, torchvision's sign).
        translate: (tx, ty) in pixels.
        scale: Scale factor, > 0.
        shear: (sx, sy) shear angles in degrees.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill: The colour of pixels mapped from outside the image.

    Returns:
        HxWx3 uint8.

    Raises:
        UserError: A bad image, interpolation, fill or a non-positive scale.
    """
    img = _check_image(img, "affine")
    check_interpolation(interpolation, "reference.affine")
    if not (scale > 0 and math.isfinite(scale)):
        raise UserValueError(f"reference.affine: scale must be positive, got {scale!r}")
    h, w = img.shape[:2]
    m = affine_matrix((w * 0.5, h * 0.5), angle, translate, scale, shear)
    out = Image.fromarray(img).transform((w, h), Image.Transform.AFFINE, m,
                                         _PIL[interpolation],
                                         fillcolor=check_fill(fill, "reference.affine"))
    return np.asarray(out).copy()


def rotate(img: np.ndarray, angle: float, interpolation: str = "nearest",
           fill: int | Sequence[int] = 0) -> np.ndarray:
    """torchvision's ``rotate`` on a PIL image: ``Image.rotate(angle)`` about the centre.

    Args:
        img: One sample, HxWx3 uint8.
        angle: Degrees, counter-clockwise.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill: The colour of the corners the rotation uncovers.

    Returns:
        HxWx3 uint8.
    """
    img = _check_image(img, "rotate")
    check_interpolation(interpolation, "reference.rotate")
    out = Image.fromarray(img).rotate(float(angle), _PIL[interpolation], expand=False,
                                      fillcolor=check_fill(fill, "reference.rotate"))
    return np.asarray(out).copy()


def vflip(img: np.ndarray, flip: bool = True) -> np.ndarray:
    """Mirror top-bottom (a copy either way)."""
    img = _check_image(img, "vflip")
    return img[::-1].copy() if bool(flip) else img.copy()


def pad(img: np.ndarray, top: int, left: int, height: int, width: int,
        fill: int | Sequence[int] = 0) -> np.ndarray:
    """``img`` at ``(top, left)`` of a ``height x width`` canvas of ``fill``."""
    img = _check_image(img, "pad")
    h, w = img.shape[:2]
    if top < 0 or left < 0 or top + h > height or left + w > width:
        raise UserValueError(f"reference.pad: a {h}x{w} image at ({top}, {left}) does not fit "
                             f"a {height}x{width} canvas")
    out = np.empty((height, width, 3), dtype=np.uint8)
    out[:] = np.asarray(check_fill(fill, "reference.pad"), dtype=np.uint8)
    out[top:top + h, left:left + w] = img
    return out


def crop(img: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    """The ``height x width`` window at ``(top, left)`` (inside the image)."""
    img = _check_image(img, "crop")
    h, w = img.shape[:2]
    if top < 0 or left < 0 or height < 1 or width < 1 or top + height > h or left + width > w:
        raise UserValueError(f"reference.crop: window ({top}, {left}, {height}, {width}) is not "
                             f"inside the {h}x{w} image")
    return img[top:top + height, left:left + width].copy()
