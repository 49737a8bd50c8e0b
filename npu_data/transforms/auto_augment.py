"""The auto-augment policies: TrivialAugmentWide, RandAugment and AutoAugment (ImageNet).

Op lists, magnitude bins and draws are torchvision 0.29's (``transforms/v2/_auto_augment.py``):
the same op and magnitude for the same draw. Each sample draws its own ops from its keyed
numbers; a step runs every sample's pixel op in one batched call (``functional.policy_step``)
and the geometric ones (ShearX/Y about the top-left corner, TranslateX/Y, Rotate, as
torchvision's PIL path) in one ``functional.warp`` with host maps. The
magnitudes are torchvision's float32 ``linspace`` values; enhance factors are ``1 + magnitude``,
Solarize's threshold ``255 * magnitude`` (kept as the first level that inverts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms import maps
from npu_data.transforms.base import ApplyContext, Batch, Params, Trait, Transform, context_of
from npu_data.transforms.draws import Uniforms

Bins = Callable[[int, int, int], "torch.Tensor | None"]
Space = dict[str, tuple[Bins, bool]]


# The magnitude bins are plain picklable objects (a transform travels to spawned workers).
@dataclass(frozen=True)
class _Linear:
    """``bins`` magnitudes from ``lo`` to ``hi`` (``per``: times the image's height or width)."""

    lo: float
    hi: float
    per: str = ""  # "h" or "w": scaled by that side

    def __call__(self, bins: int, h: int, w: int) -> torch.Tensor:
        scale = {"h": h, "w": w}.get(self.per, 1)
        return torch.linspace(self.lo, self.hi * scale, bins)


@dataclass(frozen=True)
class _Posterize:
    """Posterize's bits per bin: ``top`` down by ``span``."""

    top: int
    span: int

    def __call__(self, bins: int, h: int, w: int) -> torch.Tensor:
        return (self.top - (torch.arange(bins) / ((bins - 1) / self.span))).round().int()


def _lin(lo: float, hi: float) -> Bins:
    return _Linear(lo, hi)


def _posterize(top: int, span: int) -> Bins:
    return _Posterize(top, span)


def _none(bins: int, h: int, w: int) -> torch.Tensor | None:
    return None


_GEOMETRY_30: Space = {
    "ShearX": (_lin(0.0, 0.3), True),
    "ShearY": (_lin(0.0, 0.3), True),
    "TranslateX": (_Linear(0.0, 150.0 / 331.0, "w"), True),
    "TranslateY": (_Linear(0.0, 150.0 / 331.0, "h"), True),
    "Rotate": (_lin(0.0, 30.0), True),
}
_ENHANCE_09: Space = {op: (_lin(0.0, 0.9), True)
                      for op in ("Brightness", "Color", "Contrast", "Sharpness")}
_TAIL: Space = {
    "Solarize": (_lin(1.0, 0.0), False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
}

RAND_AUGMENT_SPACE: Space = {"Identity": (_none, False), **_GEOMETRY_30, **_ENHANCE_09,
                             "Posterize": (_posterize(8, 4), False), **_TAIL}
"""RandAugment's ops, in torchvision's order: name -> (magnitude bins(num_bins, h, w), signed)."""

TRIVIAL_AUGMENT_WIDE_SPACE: Space = {
    "Identity": (_none, False),
    "ShearX": (_lin(0.0, 0.99), True),
    "ShearY": (_lin(0.0, 0.99), True),
    "TranslateX": (_lin(0.0, 32.0), True),
    "TranslateY": (_lin(0.0, 32.0), True),
    "Rotate": (_lin(0.0, 135.0), True),
    **{op: (_lin(0.0, 0.99), True) for op in ("Brightness", "Color", "Contrast", "Sharpness")},
    "Posterize": (_posterize(8, 6), False),
    **_TAIL,
}
"""TrivialAugmentWide's ops, in torchvision's order."""

AUTO_AUGMENT_SPACE: Space = {**_GEOMETRY_30, **_ENHANCE_09, "Posterize": (_posterize(8, 4), False),
                             **_TAIL, "Invert": (_none, False)}
"""AutoAugment's ops (magnitudes over 10 bins)."""

IMAGENET_POLICY: tuple[tuple[tuple[str, float, int | None], tuple[str, float, int | None]], ...] = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)
"""AutoAugment's ImageNet policy: 25 pairs of (op, probability, magnitude bin)."""

_ID = {name: i for i, name in enumerate(F.POLICY_OPS)}
_GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
_ENHANCE_IDS = [_ID[op] for op in ("Brightness", "Color", "Contrast", "Sharpness")]


def _int(value: int, name: str, who: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserTypeError(f"{who}: {name} must be an int, got {value!r}")
    if value < low:
        raise UserValueError(f"{who}: {name} must be >= {low}, got {value!r}")
    return value


def geometric_matrix(op: str, magnitude: float, height: int, width: int) -> list[float]:
    """Pillow's inverse map for a geometric policy op as torchvision's PIL path makes it:
    shears about the top-left corner (``center=[0, 0]``), translations by ``int(magnitude)``
    px about the centre, rotations by Pillow's ``rotate``; the identity for the others."""
    if op in ("ShearX", "ShearY"):
        deg = math.degrees(math.atan(magnitude))
        shear = [deg, 0.0] if op == "ShearX" else [0.0, deg]
        return maps.affine_matrix((0.0, 0.0), 0.0, [0.0, 0.0], 1.0, shear)
    if op in ("TranslateX", "TranslateY"):
        move = [int(magnitude), 0] if op == "TranslateX" else [0, int(magnitude)]
        return maps.affine_matrix((width * 0.5, height * 0.5), 0.0, move, 1.0, [0.0, 0.0])
    if op == "Rotate":
        return maps.rotate_matrix((height, width), magnitude)
    return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


class _Policy(Transform):
    """Shared plumbing: per-sample (op, magnitude) rows, one batched step per column."""

    traits = frozenset({Trait.SAME_SIZE})  # a warp fills what it uncovers

    def __init__(self, space: Space, pixel_only: bool, interpolation: str,
                 fill: int | Sequence[int]) -> None:
        from npu_data.transforms.oracle.pillow_geometric import check_fill, check_interpolation

        if not isinstance(pixel_only, bool):
            raise UserTypeError(f"{self.name}: pixel_only must be True or False")
        self.interpolation = check_interpolation(interpolation, self.name)
        self.fill = check_fill(fill, self.name)
        self.pixel_only = pixel_only
        self.space = {k: v for k, v in space.items() if not (pixel_only and k in _GEOMETRIC)}
        self.ops = list(self.space)

    def _magnitudes(self, ops: np.ndarray, bins: np.ndarray, signs: np.ndarray, num_bins: int,
                    sizes: np.ndarray) -> Params:
        """(op names per sample and step as indices into ``self.ops``, magnitude bins, sign
        draws) -> the step parameters: ``op`` (B, S) ids in ``POLICY_OPS``, ``magnitude``
        (B, S) float32, ``factor`` 1 + magnitude (the enhance ops; 1 for the others), ``level`` Posterize bits / Solarize's first
        inverted level, ``matrix`` (B, S, 6) float64 each geometric op's Pillow map."""
        b, s = ops.shape
        op_ids = np.zeros((b, s), np.int64)
        mags = np.zeros((b, s), np.float32)
        cache: dict[tuple[str, int, int], torch.Tensor | None] = {}
        for i in range(b):
            h, w = int(sizes[i, 0]), int(sizes[i, 1])
            for j in range(s):
                name = self.ops[int(ops[i, j])] if ops[i, j] >= 0 else "Identity"
                op_ids[i, j] = _ID[name]
                fn, signed = self.space.get(name, (_none, False))
                key = (name, h if name == "TranslateY" else 0, w if name == "TranslateX" else 0)
                if key not in cache:
                    cache[key] = fn(num_bins, h, w)
                table = cache[key]
                if table is None:
                    continue
                m = float(table[int(bins[i, j])])
                mags[i, j] = -m if signed and signs[i, j] <= 0.5 else m
        m64 = mags.astype(np.float64)
        mats = np.zeros((b, s, 6), np.float64)
        for i in range(b):
            h, w = int(sizes[i, 0]), int(sizes[i, 1])
            for j in range(s):
                mats[i, j] = geometric_matrix(F.POLICY_OPS[op_ids[i, j]], float(mags[i, j]), h, w)
        level = np.where(op_ids == _ID["Posterize"], m64.astype(np.int64),
                         np.clip(np.ceil(255.0 * m64), 0, 256).astype(np.int64))
        return {"op": torch.from_numpy(op_ids), "magnitude": torch.from_numpy(mags),
                "factor": torch.from_numpy(np.where(np.isin(op_ids, _ENHANCE_IDS), 1.0 + m64,
                                                    1.0).astype(np.float32)),
                "level": torch.from_numpy(level),
                # host maps for functional.warp (never shipped to the device)
                "matrix": torch.from_numpy(mats)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        """A full batch (``ApplyContext.full``, told by Compose): every sample fills the batch, so its sizes are the batch's, known on
        the host (no padding masks, nothing read back)."""
        x, sizes = batch["image"], batch["sizes"]
        if context_of(self).full:
            sizes = torch.tensor([list(x.shape[-2:])] * x.shape[0], dtype=torch.int64
                                 ).view(-1, 2)
        for j in range(params["op"].shape[1]):
            ops = params["op"][:, j]
            with F.riding(F.policy_choose_riders(ops)):  # with the step's copy
                step = F.policy_step(x, sizes, ops, params["factor"][:, j],
                                     params["level"][:, j])
            x = self._geometric(x, step, sizes, params["op"][:, j], params["matrix"], j)
        out = dict(batch)
        out["image"] = x
        return out

    def riders(self, params: Params, ctx: ApplyContext, shape: tuple[int, int, int]
               ) -> dict[str, torch.Tensor]:
        """The first step's host-made tables of a full batch (``functional.policy_riders``);
        later steps copy their own (they would share the names)."""
        if not ctx.full or params["op"].shape[1] == 0:
            return {}
        return F.policy_riders(shape, params["op"][:, 0], params["factor"][:, 0],
                               params["level"][:, 0], params["matrix"][:, 0],
                               self.interpolation, self.fill, self.pixel_only)

    def _geometry_repr(self) -> str:
        return (f"interpolation={self.interpolation!r}, fill={self.fill}, "
                f"pixel_only={self.pixel_only}")

    def _geometric(self, x: torch.Tensor, step: torch.Tensor, sizes: torch.Tensor,
                   ops: torch.Tensor, matrices: torch.Tensor, j: int) -> torch.Tensor:
        """``step`` with the samples whose op is geometric warped from ``x`` instead (the
        host maps drawn with the parameters, one ``functional.warp`` for the batch; none when
        no sample needs one)."""
        op_ids = ops.to("cpu")  # host parameters: no device read
        geo = (op_ids >= 1) & (op_ids <= 5)  # ShearX .. Rotate in POLICY_OPS
        if self.pixel_only or not bool(geo.any()):
            return step
        maps_j = matrices.to("cpu").numpy()[:, j]  # float64 stays on the host
        warped = F.warp(x, sizes, maps_j, self.interpolation, self.fill)
        return F.choose(geo, warped, step)

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        for j in range(params["op"].shape[1]):
            image = reference_op(image, F.POLICY_OPS[int(params["op"][index, j])],
                                 float(params["magnitude"][index, j]), self.interpolation,
                                 self.fill)
        return image


def reference_op(image: np.ndarray, op: str, magnitude: float, interpolation: str = "nearest",
                 fill: int | Sequence[int] = 0) -> np.ndarray:
    """torchvision's ``_apply_image_or_video_transform`` for one op on the Pillow reference
    (magnitude as torchvision passes it).

    Args:
        image: One sample, HxWx3 uint8.
        op: A name of ``functional.POLICY_OPS``.
        magnitude: The signed magnitude torchvision would pass.
        interpolation: ``"nearest"`` or ``"bilinear"`` (the geometric ops).
        fill: The colour the geometric ops uncover.

    Returns:
        HxWx3 uint8.

    Raises:
        UserValueError: An op name that is not a policy op.
    """
    from PIL import Image

    from npu_data.transforms.oracle import pillow as R
    from npu_data.transforms.oracle import pillow_geometric as G

    if op == "Identity":
        return image
    if op in ("ShearX", "ShearY"):  # torchvision's centre [0, 0]: Pillow's transform as is
        h, w = image.shape[:2]
        filters = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR}
        out = Image.fromarray(image).transform(
            (w, h), Image.Transform.AFFINE, geometric_matrix(op, magnitude, h, w),
            filters[interpolation], fillcolor=G.check_fill(fill, "reference_op"))
        return np.asarray(out).copy()
    if op in ("TranslateX", "TranslateY"):
        move = [int(magnitude), 0] if op == "TranslateX" else [0, int(magnitude)]
        return G.affine(image, 0.0, move, 1.0, [0.0, 0.0], interpolation, fill)
    if op == "Rotate":
        return G.rotate(image, magnitude, interpolation, fill)
    enhance = {"Brightness": R.adjust_brightness, "Color": R.adjust_saturation,
               "Contrast": R.adjust_contrast, "Sharpness": R.adjust_sharpness}
    if op in enhance:
        return enhance[op](image, 1.0 + magnitude)
    if op == "Posterize":
        return R.posterize(image, int(magnitude))
    if op == "Solarize":
        return R.solarize(image, 255.0 * magnitude)
    plain = {"AutoContrast": R.autocontrast, "Equalize": R.equalize, "Invert": R.invert}
    if op in plain:
        return plain[op](image)
    raise UserValueError(f"reference_op: unknown op {op!r} — one of {F.POLICY_OPS}")


class TrivialAugmentWide(_Policy):
    """One op per sample from TrivialAugmentWide's 14, at a uniform magnitude bin, signed by
    a coin where torchvision signs it.

    Args:
        num_magnitude_bins: How many magnitudes (torchvision: 31).
        interpolation: The geometric ops' ``"nearest"`` (torchvision's default) or
            ``"bilinear"``.
        fill: The colour the geometric ops uncover (int or three ints).
        pixel_only: Leave out the geometric ops (ShearX/Y, TranslateX/Y, Rotate): not
            torchvision's op list, but every op then runs without host maps.

    Raises:
        UserError: A bin count below 2, a bad interpolation or fill.
    """

    def __init__(self, num_magnitude_bins: int = 31, interpolation: str = "nearest",
                 fill: int | Sequence[int] = 0, pixel_only: bool = False) -> None:
        self.num_magnitude_bins = _int(num_magnitude_bins, "num_magnitude_bins", self.name, 2)
        super().__init__(TRIVIAL_AUGMENT_WIDE_SPACE, pixel_only, interpolation, fill)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        u = rng.uniform(3)
        ops = np.floor(u[:, 0:1] * len(self.ops)).astype(np.int64)
        bins = np.floor(u[:, 1:2] * self.num_magnitude_bins).astype(np.int64)
        return self._magnitudes(ops, bins, u[:, 2:3], self.num_magnitude_bins, sizes)


class RandAugment(_Policy):
    """``num_ops`` ops per sample, each uniform from RandAugment's 14, all at bin
    ``magnitude``.

    Args:
        num_ops: Ops per sample (>= 0).
        magnitude: The bin, in ``0 .. num_magnitude_bins - 1``.
        num_magnitude_bins: How many magnitudes (torchvision: 31).
        interpolation: The geometric ops' ``"nearest"`` or ``"bilinear"``.
        fill: The colour the geometric ops uncover.
        pixel_only: Leave out the geometric ops.

    Raises:
        UserError: Bad counts, a magnitude outside the bins, a bad interpolation or fill.
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: str = "nearest", fill: int | Sequence[int] = 0,
                 pixel_only: bool = False) -> None:
        self.num_ops = _int(num_ops, "num_ops", self.name, 0)
        self.num_magnitude_bins = _int(num_magnitude_bins, "num_magnitude_bins", self.name, 2)
        self.magnitude = _int(magnitude, "magnitude", self.name, 0)
        if self.magnitude >= self.num_magnitude_bins:
            raise UserValueError(f"{self.name}: magnitude must be below num_magnitude_bins="
                                 f"{self.num_magnitude_bins}, got {magnitude}")
        super().__init__(RAND_AUGMENT_SPACE, pixel_only, interpolation, fill)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        b = len(rng)
        u = rng.uniform(2 * self.num_ops).reshape(b, self.num_ops, 2)
        ops = np.floor(u[..., 0] * len(self.ops)).astype(np.int64)
        bins = np.full((b, self.num_ops), self.magnitude, np.int64)
        return self._magnitudes(ops, bins, u[..., 1], self.num_magnitude_bins, sizes)


class AutoAugment(_Policy):
    """AutoAugment's ImageNet policy: one of 25 sub-policies per sample, each of its two ops
    run with its probability at its magnitude bin (of 10).

    Args:
        policy: ``"imagenet"`` (the one offered).
        interpolation: The geometric ops' ``"nearest"`` or ``"bilinear"``.
        fill: The colour the geometric ops uncover.
        pixel_only: Sub-policy ops that are geometric become Identity.

    Raises:
        UserError: Another policy, a bad interpolation or fill.
    """

    def __init__(self, policy: str = "imagenet", interpolation: str = "nearest",
                 fill: int | Sequence[int] = 0, pixel_only: bool = False) -> None:
        if policy != "imagenet":
            raise UserValueError(f"{self.name}: policy must be 'imagenet' (the one offered), "
                                 f"got {policy!r}")
        self.policy = policy
        super().__init__(AUTO_AUGMENT_SPACE, pixel_only, interpolation, fill)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        b = len(rng)
        u = rng.uniform(5)
        pick = np.floor(u[:, 0] * len(IMAGENET_POLICY)).astype(np.int64)
        ops = np.full((b, 2), -1, np.int64)
        bins = np.zeros((b, 2), np.int64)
        for i in range(b):
            for j, (name, prob, bin_) in enumerate(IMAGENET_POLICY[int(pick[i])]):
                if u[i, 1 + 2 * j] <= prob and name in self.space:
                    ops[i, j] = self.ops.index(name)
                    bins[i, j] = bin_ or 0
        signs = u[:, 2::2]
        return self._magnitudes(ops, bins, signs, 10, sizes)


__all__ = ["AUTO_AUGMENT_SPACE", "IMAGENET_POLICY", "RAND_AUGMENT_SPACE",
           "TRIVIAL_AUGMENT_WIDE_SPACE", "AutoAugment", "RandAugment", "TrivialAugmentWide",
           "geometric_matrix", "reference_op"]
