"""Crops and resizes: RandomResizedCrop here; Resize, CenterCrop, ResizeCenterCrop and
ResizeCrop in ``transforms.resize`` (re-exported).

Each draws or computes one crop box (or window, ``crop_base``) per sample and runs one
batched ``functional.resized_crop`` (Pillow BILINEAR, BICUBIC or LANCZOS, antialiased); the batch's geometry
keys follow through ``transforms.geometry``, and the micro-conditioning keys are written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import Params, pair
from npu_data.transforms.crop_base import _CropBase, box_params, check_min_visible
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.functional import check_interpolation
from npu_data.transforms.resize import CenterCrop, Resize, ResizeCenterCrop, ResizeCrop

__all__ = ["CenterCrop", "RandomResizedCrop", "Resize", "ResizeCenterCrop", "ResizeCrop",
           "_CropBase"]


def _range(value: Sequence[float], what: str, who: str, positive: bool) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as e:
        error = UserTypeError if isinstance(e, TypeError) else UserValueError
        raise error(f"{who}: {what} must be a pair (min, max), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0 or (
        positive and lo <= 0
    ):
        raise UserValueError(
            f"{who}: {what} must be a pair 0 {'<' if positive else '<='} min <= max, got "
            f"{tuple(value)!r}"
        )
    return lo, hi


def _filter_repr(interpolation: str) -> str:
    return "" if interpolation == "bilinear" else f", interpolation={interpolation!r}"


class RandomResizedCrop(_CropBase):
    """Crop a random area and aspect ratio per sample, resized to ``size``.

    The parameters follow torchvision's ``RandomResizedCrop.get_params``: 10 candidates per
    sample (drawn at once, ``(B, 10)``), the first that fits is used, else the same central
    fallback crop (:meth:`make_params`, float64 on the host, keyed or from a generator).

    Args:
        size: The output (height, width), or one int for both.
        scale: (min, max) fraction of the image's area the crop covers, 0 <= min <= max.
        ratio: (min, max) aspect ratio (width / height) of the crop, 0 < min <= max.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"`` (Pillow's filters).

    Raises:
        UserError: A ``size`` that is not positive ints, a ``scale`` or ``ratio`` that is not an
            ordered pair in range, a ``min_visible`` outside [0, 1], or an unknown
            ``interpolation``.
    """

    name = "RandomResizedCrop"
    attempts = 10
    size: tuple[int, int]

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        min_visible: float = 0.25,
        interpolation: str = "bilinear",
    ) -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.size = pair(size, "size", self.name)
        self.scale = _range(scale, "scale", self.name, positive=False)
        if self.scale[1] <= 0:
            raise UserValueError(f"{self.name}: scale max must be > 0, got {tuple(scale)!r}")
        self.ratio = _range(ratio, "ratio", self.name, positive=True)
        self.min_visible = check_min_visible(min_visible, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """torchvision's ``get_params`` for every sample at once, in float64 on the host:
        ``attempts`` candidates from 2 draws each, the first that fits, else the central
        fallback; the position from 2 more draws (``randint``'s uniform integers)."""
        h = sizes[:, 0].astype(np.float64)
        w = sizes[:, 1].astype(np.float64)
        u = rng.uniform(2 * self.attempts).reshape(-1, self.attempts, 2)
        s0, s1 = self.scale
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        target = (h * w)[:, None] * (s0 + u[..., 0] * (s1 - s0))
        aspect = np.exp(lr0 + u[..., 1] * (lr1 - lr0))
        cw = np.round(np.sqrt(target * aspect))
        ch = np.round(np.sqrt(target / aspect))
        ok = (cw > 0) & (cw <= w[:, None]) & (ch > 0) & (ch <= h[:, None])
        first = ok.argmax(axis=1)
        found = ok.any(axis=1)
        rows = np.arange(len(h))
        rmin, rmax = self.ratio
        in_ratio = w / np.maximum(h, 1)
        fw = np.where(in_ratio > rmax, np.round(h * rmax), w)
        fh = np.where(in_ratio < rmin, np.round(w / rmin), h)
        ch = np.where(found, ch[rows, first], fh)
        cw = np.where(found, cw[rows, first], fw)
        pos = rng.uniform(2)
        top = np.where(found, np.minimum(np.floor(pos[:, 0] * (h - ch + 1)), h - ch),
                       np.floor((h - ch) / 2))
        left = np.where(found, np.minimum(np.floor(pos[:, 1] * (w - cw + 1)), w - cw),
                        np.floor((w - cw) / 2))
        boxes = np.stack([top, left, ch, cw], axis=1).astype(np.int64)
        return box_params(boxes, self.size)

    def __repr__(self) -> str:
        return (
            f"{self.name}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"min_visible={self.min_visible}{_filter_repr(self.interpolation)})"
        )
