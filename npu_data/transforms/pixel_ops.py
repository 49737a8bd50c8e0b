"""Per-sample pixel augmentations: GaussianBlur, RandomGrayscale, RandomErasing and
RandomPhotometricDistort (torchvision v2's draws, keyed per sample)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import ApplyContext, Batch, Params, Trait, Transform, context_of
from npu_data.transforms.draws import Uniforms


def probability(p: float, who: str) -> float:
    """``p`` as a float in [0, 1], or a one-line UserError naming ``who``."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise UserValueError(f"{who}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


def number_range(value: float | Sequence[float], name: str, who: str, low: float = 0.0,
                 strict: bool = False) -> tuple[float, float]:
    """A ``(min, max)`` pair from one number (``(v, v)``) or two, each >= ``low``
    (> ``low`` with ``strict``)."""
    vals = [value] if isinstance(value, int | float) else value
    if isinstance(vals, str) or not isinstance(vals, Sequence) or len(vals) not in (1, 2) or \
            not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
        raise UserTypeError(f"{who}: {name} must be a number or (min, max), got {value!r}")
    lo, hi = float(vals[0]), float(vals[-1])
    bad = (lo <= low) if strict else (lo < low)
    if bad or not lo <= hi or not math.isfinite(hi):
        rel = ">" if strict else ">="
        raise UserValueError(f"{who}: {name} must be finite, min <= max and min {rel} {low}, "
                             f"got {value!r}")
    return lo, hi


class GaussianBlur(Transform):
    """Blur each sample with its own ``sigma``, uniform in ``sigma`` (torchvision v2).

    Args:
        kernel_size: Odd positive int, or ``(kx, ky)`` (width first, as torchvision).
        sigma: ``(min, max)`` or one number > 0.

    Raises:
        UserError: An even or non-positive kernel size, or a sigma that is not > 0.
    """

    def __init__(self, kernel_size: int | Sequence[int],
                 sigma: float | Sequence[float] = (0.1, 2.0)) -> None:
        try:
            self.kernel_size = F._kernel_size(kernel_size)
        except (UserTypeError, UserValueError) as e:
            raise type(e)(f"{self.name}: {e}") from None
        self.sigma = number_range(sigma, "sigma", self.name, strict=True)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        lo, hi = self.sigma
        return {"sigma": torch.from_numpy((lo + rng.uniform(1)[:, 0] * (hi - lo)
                                           ).astype(np.float32))}

    def apply(self, batch: Batch, params: Params) -> Batch:
        out = dict(batch)
        out["image"] = F.gaussian_blur(batch["image"], batch["sizes"], self.kernel_size,
                                       params["sigma"])
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        return reference.gaussian_blur(image, self.kernel_size, float(params["sigma"][index]))


class RandomGrayscale(Transform):
    """Turn each sample grey (3 equal channels) with probability ``p``.

    Args:
        p: The probability, in [0, 1].
    """

    def __init__(self, p: float = 0.1) -> None:
        self.p = probability(p, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"grey": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        out = dict(batch)
        out["image"] = F.rgb_to_grayscale(batch["image"], batch["sizes"], params["grey"])
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        return reference.rgb_to_grayscale(image) if bool(params["grey"][index]) else image


_ATTEMPTS = 10


class RandomErasing(Transform):
    """Erase one box of each sample with probability ``p`` (torchvision v2's draw: up to 10
    tries of an area fraction in ``scale`` and a log-uniform aspect ``ratio``; no box fits:
    nothing erased).

    Args:
        p: The probability, in [0, 1].
        scale: ``(min, max)`` fraction of the valid image's area.
        ratio: ``(min, max)`` aspect ratio (height / width).
        value: The fill: one level or one per channel (0..255), or ``"random"``:
            per-pixel normal noise keyed per sample (``transforms.noise``), ImageNet's mean
            and std in levels, so that after ``Normalize()`` it is standard normal as
            torchvision's (its tails clipped to 0..255). Erase after Normalize in
            torchvision is erase before it here: its ``value=0`` is the mean levels here.

    Raises:
        UserError: A bad probability, range or value.
    """

    traits = frozenset({Trait.SAME_SIZE})

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33),
                 ratio: Sequence[float] = (0.3, 3.3),
                 value: int | Sequence[int] | str = 0) -> None:
        self.p = probability(p, self.name)
        self.scale = number_range(scale, "scale", self.name)
        if self.scale[1] > 1:
            raise UserValueError(f"{self.name}: scale must lie in [0, 1], got {scale!r}")
        self.ratio = number_range(ratio, "ratio", self.name, strict=True)
        self.value: tuple[int, ...] | str
        if isinstance(value, str):
            if value != "random":
                raise UserValueError(f"{self.name}: value={value!r} is not offered — pass "
                                     "'random', a level 0..255 or one per channel, e.g. "
                                     "value=(124, 116, 104)")
            self.value = value
            return
        vals = [value] if isinstance(value, int | float) else list(value)
        if len(vals) not in (1, 3) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in vals):
            raise UserValueError(f"{self.name}: value must be a level 0..255 or 3 of them, got "
                                 f"{value!r}")
        self.value = tuple(int(v) for v in (vals * 3 if len(vals) == 1 else vals))

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        b = len(rng)
        coin = rng.uniform(1)[:, 0]
        u = rng.uniform(4 * _ATTEMPTS).reshape(b, _ATTEMPTS, 4)
        img_h, img_w = sizes[:, 0:1].astype(np.float64), sizes[:, 1:2].astype(np.float64)
        area = img_h * img_w * (self.scale[0] + u[..., 0] * (self.scale[1] - self.scale[0]))
        lr = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        aspect = np.exp(lr[0] + u[..., 1] * (lr[1] - lr[0]))
        h = np.round(np.sqrt(area * aspect))
        w = np.round(np.sqrt(area / aspect))
        fits = (h < img_h) & (w < img_w)
        top = np.floor(u[..., 2] * (img_h - h + 1))
        left = np.floor(u[..., 3] * (img_w - w + 1))
        first = np.argmax(fits, axis=1)
        rows = np.arange(b)
        erase = fits[rows, first] & (coin < self.p)
        boxes = np.stack([top[rows, first], left[rows, first], h[rows, first],
                          w[rows, first]], 1) * erase[:, None]
        params = {"boxes": torch.from_numpy(boxes.astype(np.int64))}
        if self.value == "random":  # drawn after the box: the boxes are value's alone
            seeds = np.floor(rng.uniform(1)[:, 0] * (1 << 32)).astype(np.int64)
            params["noise_seed"] = torch.from_numpy(seeds)
        return params

    def apply(self, batch: Batch, params: Params) -> Batch:
        """A full batch (``ApplyContext.full``, told by Compose): every sample fills the batch, so its sizes are the batch's, known on
        the host (the boxes are cut there, and their masks made there)."""
        out = dict(batch)
        sizes = batch["sizes"]
        if context_of(self).full:
            image = batch["image"]
            sizes = torch.tensor([list(image.shape[-2:])] * image.shape[0],
                                 dtype=torch.int64).view(-1, 2)
        if self.value == "random":
            out["image"] = F.erase(batch["image"], sizes, params["boxes"], "random",
                                   noise_seeds=params["noise_seed"])
        else:
            out["image"] = F.erase(batch["image"], sizes, params["boxes"],
                                   torch.tensor(self.value, dtype=torch.uint8))
        return out

    def riders(self, params: Params, ctx: ApplyContext, shape: tuple[int, int, int]
               ) -> dict[str, torch.Tensor]:
        """The box masks and fill of a full batch (``functional.erase_riders``)."""
        if self.value == "random" or not ctx.full:
            return {}
        return F.erase_riders(shape, params["boxes"], torch.tensor(self.value, dtype=torch.uint8))

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        box = params["boxes"][index].tolist()
        if self.value == "random":
            return reference.erase(image, box, "random",
                                   seed=int(params["noise_seed"][index]))
        return reference.erase(image, box, self.value)


_JITTER_OPS = ("brightness", "contrast", "saturation", "hue")


class RandomPhotometricDistort(Transform):
    """torchvision v2's SSD colour distortion per sample: brightness, contrast, saturation,
    hue and a channel permutation, each with probability ``p``; contrast before saturation
    or after hue (a coin).

    Args:
        brightness: ``(min, max)`` factor.
        contrast: ``(min, max)`` factor.
        saturation: ``(min, max)`` factor.
        hue: ``(min, max)`` shift within [-0.5, 0.5].
        p: Each adjustment's probability.

    Raises:
        UserError: A bad range or probability.
    """

    def __init__(self, brightness: Sequence[float] = (0.875, 1.125),
                 contrast: Sequence[float] = (0.5, 1.5), hue: Sequence[float] = (-0.05, 0.05),
                 saturation: Sequence[float] = (0.5, 1.5), p: float = 0.5) -> None:
        self.ranges = {
            "brightness": number_range(brightness, "brightness", self.name),
            "contrast": number_range(contrast, "contrast", self.name),
            "saturation": number_range(saturation, "saturation", self.name),
            "hue": number_range(hue, "hue", self.name, low=-0.5),
        }
        if self.ranges["hue"][1] > 0.5:
            raise UserValueError(f"{self.name}: hue must lie in [-0.5, 0.5], got {hue!r}")
        self.p = probability(p, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        coins = rng.uniform(4) < self.p
        u = rng.uniform(4)
        params: Params = {}
        for i, op in enumerate(_JITTER_OPS):
            lo, hi = self.ranges[op]
            ident = 0.0 if op == "hue" else 1.0
            params[op] = torch.from_numpy(np.where(coins[:, i], lo + u[:, i] * (hi - lo), ident
                                                   ).astype(np.float32))
        params["hue_on"] = torch.from_numpy(coins[:, 3].copy())
        params["contrast_before"] = torch.from_numpy(rng.uniform(1)[:, 0] < 0.5)
        permute = rng.uniform(1)[:, 0] < self.p
        order = np.argsort(rng.uniform(3), axis=1, kind="stable")
        params["permutation"] = torch.from_numpy(
            np.where(permute[:, None], order, np.arange(3)).astype(np.int64))
        return params

    def apply(self, batch: Batch, params: Params) -> Batch:
        x, sizes = batch["image"], batch["sizes"]
        before = params["contrast_before"].to(torch.bool)
        one = torch.ones_like(params["contrast"])
        c_first = torch.where(before, params["contrast"], one)
        c_last = torch.where(before, one, params["contrast"])
        x = F.color_jitter(x, sizes, (0, 1, 2), None, params["brightness"], c_first,
                           params["saturation"], params["hue"])
        on = params["hue_on"].to(torch.bool)
        hued = F.adjust_hue(x, sizes, params["hue"])
        x = F.choose(on, hued, x)
        x = F.adjust_contrast(x, sizes, c_last)
        out = dict(batch)
        out["image"] = F.permute_channels(x, sizes, params["permutation"])
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as R

        def factor(op: str) -> float:
            return float(params[op][index])

        before = bool(params["contrast_before"][index])
        image = R.adjust_brightness(image, factor("brightness"))
        if before:
            image = R.adjust_contrast(image, factor("contrast"))
        image = R.adjust_saturation(image, factor("saturation"))
        if bool(params["hue_on"][index]):
            image = R.adjust_hue(image, factor("hue"))
        if not before:
            image = R.adjust_contrast(image, factor("contrast"))
        return image[:, :, params["permutation"][index].numpy()].copy()

