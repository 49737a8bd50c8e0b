"""RandomAffine, RandomRotation and RandomVerticalFlip: torchvision's, per sample, batched.

Each draws torchvision's parameters per sample (``make_params``, float64 on the host, stored
as float32 host tensors with the sizes they were drawn for) and applies them with
``functional.affine`` / ``rotate`` / ``vflip``: the pixels of torchvision's PIL path (nearest
exact, bilinear within one level). The geometry keys follow the same maps
(``warp_geometry``): boxes become the box around their moved corners, rotated boxes,
polygons, keypoints and ellipses move exactly, masks are warped nearest, with the crops'
visibility rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import Batch, Params, Transform
from npu_data.transforms.crop import check_min_visible
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.maps import (
    affine_matrices,
    check_fill,
    check_interpolation,
    rotate_matrices,
    translation_matrices,
)
from npu_data.transforms.warp_geometry import Warp, warp_geometry

__all__ = ["RandomAffine", "RandomRotation", "RandomVerticalFlip"]


def _number(v: object, what: str, who: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise UserTypeError(f"{who}: {what} must be numbers, got {v!r}")
    f = float(v)
    if not math.isfinite(f):
        raise UserValueError(f"{who}: {what} must be finite, got {v!r}")
    return f


def degrees_range(value: float | Sequence[float], what: str, who: str) -> tuple[float, float]:
    """torchvision's ``degrees``: one number ``d >= 0`` for ``(-d, d)``, or ``(min, max)``."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            raise UserValueError(f"{who}: {what} must be a number or (min, max), got {value!r}")
        lo, hi = (_number(v, what, who) for v in value)
    else:
        d = _number(value, what, who)
        if d < 0:
            raise UserValueError(f"{who}: a single {what} value must be >= 0, got {value!r} — "
                                 f"it means (-{what}, +{what})")
        lo, hi = -d, d
    if lo > hi:
        raise UserValueError(f"{who}: {what} must be (min, max) with min <= max, got {value!r}")
    return lo, hi


def _uniform(u: np.ndarray, lo: float | np.ndarray, hi: float | np.ndarray) -> np.ndarray:
    return np.asarray(lo + u * (hi - lo), dtype=np.float64)


def _host_sizes(params: Params, batch: Batch) -> torch.Tensor:
    """The sizes the parameters were drawn for (host), else the batch's (the maps are made
    on the host from each sample's centre)."""
    sizes = params.get("sizes")
    return sizes if sizes is not None else batch["sizes"].to("cpu")


class _Warping(Transform):
    """Shared apply: the image through ``functional``, the geometry through the same maps."""

    min_visible = 0.25

    def matrices(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        """``(B, 6)`` float64: each sample's inverse map (Pillow's coefficients)."""
        raise NotImplementedError

    def pixels(self, images: torch.Tensor, sizes: torch.Tensor, params: Params) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, batch: Batch, params: Params) -> Batch:
        sizes = _host_sizes(params, batch)
        out = dict(batch)
        out["image"] = self.pixels(batch["image"], sizes, params)
        shape = (int(batch["image"].shape[2]), int(batch["image"].shape[3]))
        m = self.matrices(sizes.numpy().astype(np.int64), params)
        warp = Warp.from_inverse(m, sizes, sizes, shape, self.min_visible)
        out.update(warp_geometry(batch, warp))
        return out


class RandomAffine(_Warping):
    """torchvision's ``RandomAffine`` about each sample's centre, output size kept.

    Args:
        degrees: Rotation range: ``d`` for (-d, d), or (min, max); clockwise (torchvision's
            affine sign, the opposite of RandomRotation's).
        translate: Optional (a, b): horizontal and vertical shifts drawn in
            ``(-a * width, a * width)`` and ``(-b * height, b * height)``, rounded to pixels.
        scale: Optional (min, max) scale range, 0 < min <= max.
        shear: Optional shear: ``s`` for x in (-s, s), (min, max) for x, or (x min, x max,
            y min, y max), in degrees.
        interpolation: ``"nearest"`` (exact) or ``"bilinear"`` (within one level).
        fill: The colour of the uncovered area (int or three ints 0..255).
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid.

    Raises:
        UserError: A range that is not numbers or not ordered, a translate outside [0, 1], a
            scale <= 0, a bad interpolation, fill or ``min_visible``.
    """

    def __init__(self, degrees: float | Sequence[float],
                 translate: Sequence[float] | None = None,
                 scale: Sequence[float] | None = None,
                 shear: float | Sequence[float] | None = None,
                 interpolation: str = "nearest", fill: int | Sequence[int] = 0,
                 min_visible: float = 0.25) -> None:
        who = self.name
        self.degrees = degrees_range(degrees, "degrees", who)
        self.translate = None if translate is None else self._fractions(translate)
        self.scale = None if scale is None else degrees_range(scale, "scale", who)
        if self.scale is not None and self.scale[0] <= 0:
            raise UserValueError(f"{who}: scale must be (min, max) with 0 < min, got {scale!r}")
        self.shear = None if shear is None else self._shear(shear)
        self.interpolation = check_interpolation(interpolation, who)
        self.fill = check_fill(fill, who)
        self.min_visible = check_min_visible(min_visible, who)

    def _fractions(self, translate: Sequence[float]) -> tuple[float, float]:
        if not isinstance(translate, Sequence) or len(translate) != 2:
            raise UserValueError(f"{self.name}: translate must be (a, b), got {translate!r}")
        a, b = (_number(v, "translate", self.name) for v in translate)
        if not (0 <= a <= 1 and 0 <= b <= 1):
            raise UserValueError(f"{self.name}: translate fractions must be in [0, 1], got "
                                 f"{translate!r}")
        return a, b

    def _shear(self, shear: float | Sequence[float]) -> tuple[float, float, float, float]:
        if isinstance(shear, Sequence) and len(shear) == 4:
            x = degrees_range(shear[:2], "shear", self.name)
            y = degrees_range(shear[2:], "shear", self.name)
            got = (x[0], x[1], y[0], y[1])
        else:
            x = degrees_range(shear, "shear", self.name)
            got = (x[0], x[1], 0.0, 0.0)
        if any(not -90 < v < 90 for v in got):  # tan(90 degrees): a singular map
            raise UserValueError(f"{self.name}: shear angles must lie strictly between -90 and "
                                 f"90 degrees (90 folds the image onto a line), got {shear!r}")
        return got

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """torchvision's ``make_params`` per sample: angle, translation (rounded half to
        even, as Python's ``round``), scale, shear; six draws per sample whatever is set."""
        u = rng.uniform(6)
        h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
        angle = _uniform(u[:, 0], *self.degrees)
        translate: np.ndarray
        if self.translate is None:
            translate = np.zeros((len(sizes), 2))
        else:
            dx, dy = self.translate[0] * w, self.translate[1] * h
            translate = np.stack([np.round(_uniform(u[:, 1], -dx, dx)),
                                  np.round(_uniform(u[:, 2], -dy, dy))], axis=1)
        scale = np.ones(len(sizes)) if self.scale is None else _uniform(u[:, 3], *self.scale)
        if self.shear is None:
            shear = np.zeros((len(sizes), 2))
        else:
            sx0, sx1, sy0, sy1 = self.shear
            shear = np.stack([_uniform(u[:, 4], sx0, sx1), _uniform(u[:, 5], sy0, sy1)], axis=1)
        f32 = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in (
            ("angle", angle), ("translate", translate), ("scale", scale), ("shear", shear))}
        return {**f32, "sizes": torch.from_numpy(sizes.astype(np.int64).copy())}

    def matrices(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        return affine_matrices(sizes, *(params[k].numpy().astype(np.float64) for k in (
            "angle", "translate", "scale", "shear")))

    def pixels(self, images: torch.Tensor, sizes: torch.Tensor, params: Params) -> torch.Tensor:
        return F.affine(images, sizes, params["angle"], params["translate"], params["scale"],
                        params["shear"], self.interpolation, self.fill)

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        return RG.affine(image, float(params["angle"][index]),
                         params["translate"][index].tolist(), float(params["scale"][index]),
                         params["shear"][index].tolist(), self.interpolation, self.fill)


class RandomRotation(_Warping):
    """torchvision's ``RandomRotation`` (``expand=False``, about the centre): Pillow's
    ``Image.rotate`` per sample.

    Args:
        degrees: ``d`` for (-d, d), or (min, max); counter-clockwise.
        interpolation: ``"nearest"`` (exact) or ``"bilinear"`` (within one level).
        fill: The colour of the uncovered corners (int or three ints 0..255).
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid.

    Raises:
        UserError: A bad range, interpolation, fill or ``min_visible``.
    """

    def __init__(self, degrees: float | Sequence[float], interpolation: str = "nearest",
                 fill: int | Sequence[int] = 0, min_visible: float = 0.25) -> None:
        self.degrees = degrees_range(degrees, "degrees", self.name)
        self.interpolation = check_interpolation(interpolation, self.name)
        self.fill = check_fill(fill, self.name)
        self.min_visible = check_min_visible(min_visible, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        angle = _uniform(rng.uniform(1)[:, 0], *self.degrees).astype(np.float32)
        return {"angle": torch.from_numpy(angle),
                "sizes": torch.from_numpy(sizes.astype(np.int64).copy())}

    def matrices(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        return rotate_matrices(sizes, params["angle"].numpy().astype(np.float64))

    def pixels(self, images: torch.Tensor, sizes: torch.Tensor, params: Params) -> torch.Tensor:
        return F.rotate(images, sizes, params["angle"], self.interpolation, self.fill)

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        return RG.rotate(image, float(params["angle"][index]), self.interpolation, self.fill)


class RandomVerticalFlip(_Warping):
    """Mirror each sample top-bottom (and its geometry) with probability ``p``.

    Args:
        p: The probability, in [0, 1].

    Raises:
        UserError: ``p`` is not a probability.
    """

    def __init__(self, p: float = 0.5) -> None:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"flip": torch.from_numpy(rng.uniform(1)[:, 0] < self.p),
                "sizes": torch.from_numpy(sizes.astype(np.int64).copy())}

    def matrices(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        """The flip as a map: source row ``h - y`` where flipped, the identity elsewhere."""
        flip = params["flip"].numpy().astype(bool)
        m = translation_matrices(np.zeros(len(sizes)), np.zeros(len(sizes)))
        m[flip, 4], m[flip, 5] = -1.0, sizes[flip, 0]
        return m

    def pixels(self, images: torch.Tensor, sizes: torch.Tensor, params: Params) -> torch.Tensor:
        return F.vflip(images, sizes, params["flip"].to(torch.bool))

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        return RG.vflip(image, bool(params["flip"][index]))

