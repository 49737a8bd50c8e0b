"""The argument checks every CPU reference shares (``pillow``, ``pillow_pixel``)."""

from __future__ import annotations

import math

import numpy as np

from npu_data.errors import UserTypeError, UserValueError


def _check_image(img: np.ndarray, who: str) -> np.ndarray:
    if not isinstance(img, np.ndarray):
        raise UserTypeError(f"reference.{who}: image must be a numpy array HxWx3, "
                            f"got {type(img).__name__}")
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise UserValueError(
            f"reference.{who}: image must be HxWx3 uint8, got shape {img.shape} "
            f"{img.dtype} — pass one sample's valid region (transforms.sample_image)"
        )
    if img.shape[0] < 1 or img.shape[1] < 1:
        raise UserValueError(f"reference.{who}: image is empty (shape {img.shape})")
    return np.ascontiguousarray(img)


def _check_factor(factor: float, who: str, low: float = 0.0, high: float = math.inf) -> float:
    try:
        f = float(factor)
    except (TypeError, ValueError) as e:
        error = UserTypeError if isinstance(e, TypeError) else UserValueError
        raise error(f"reference.{who}: factor must be a number, got {factor!r}") from None
    if not math.isfinite(f) or f < low or f > high:
        bounds = f"[{low}, {high}]" if math.isfinite(high) else f">= {low}"
        raise UserValueError(f"reference.{who}: factor must be finite and {bounds}, got {factor!r}")
    return f
