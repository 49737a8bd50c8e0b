"""ColorJitter with per-sample factors and a per-sample random order of its adjustments."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import ApplyContext, Batch, Params, Trait, Transform, context_of
from npu_data.transforms.draws import Uniforms

OPS = F.COLOR_OPS
_IDENTITY = (1.0, 1.0, 1.0, 0.0)


def _factor_range(
    value: float | Sequence[float] | None, name: str, center: float, bound: tuple[float, float]
) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: None when the op is disabled."""
    who = "ColorJitter"
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0 or not math.isfinite(value):
            raise UserValueError(f"{who}: {name}={value!r} must be a non-negative number")
        lo, hi = center - float(value), center + float(value)
        if center == 1.0:
            lo = max(lo, 0.0)
        if name == "hue" and value > 0.5:
            raise UserValueError(f"{who}: hue={value!r} must be in [0, 0.5]")
    elif isinstance(value, Sequence) and len(value) == 2:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError) as e:
            error = UserTypeError if isinstance(e, TypeError) else UserValueError
            raise error(f"{who}: {name}={value!r} must hold two numbers") from None
        if not (bound[0] <= lo <= hi <= bound[1]):
            raise UserValueError(
                f"{who}: {name}={tuple(value)!r} must satisfy {bound[0]} <= min <= max <= {bound[1]}"
            )
    else:
        raise UserTypeError(f"{who}: {name} must be a number or a pair (min, max), got {value!r}")
    if lo == hi == center:
        return None
    return lo, hi


class ColorJitter(Transform):
    """Random brightness, contrast, saturation and hue, drawn per sample (torchvision ranges).

    One ``functional.color_jitter`` call runs the batch's whole sequence. Each factor is a
    number ``x`` (brightness, contrast, saturation: uniform in ``[max(0, 1 - x), 1 + x]``;
    hue: in ``[-x, x]``, ``x <= 0.5``), a pair (min, max), or 0 / None to leave it out.

    Args:
        brightness: Blend with black (``ImageEnhance.Brightness``).
        contrast: Blend with the grayscale mean (``ImageEnhance.Contrast``).
        saturation: Blend with each pixel's grayscale (``ImageEnhance.Color``).
        hue: Shift the hue (Pillow HSV), within [-0.5, 0.5].
        order: ``"random"`` (default): the enabled adjustments in an independent random order
            per sample, as torchvision's per-image PIL path does; ``"fixed"``: brightness,
            contrast, saturation, hue in that order.

    Raises:
        UserError: A factor that is negative, not finite, not a number or pair, or a pair
            outside its bounds; an ``order`` other than ``"random"`` or ``"fixed"``.
    """

    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})  # contrast's mean is mirror-free

    def __init__(
        self,
        brightness: float | Sequence[float] | None = 0,
        contrast: float | Sequence[float] | None = 0,
        saturation: float | Sequence[float] | None = 0,
        hue: float | Sequence[float] | None = 0,
        order: str = "random",
    ) -> None:
        inf = float("inf")
        self.ranges = {
            "brightness": _factor_range(brightness, "brightness", 1.0, (0.0, inf)),
            "contrast": _factor_range(contrast, "contrast", 1.0, (0.0, inf)),
            "saturation": _factor_range(saturation, "saturation", 1.0, (0.0, inf)),
            "hue": _factor_range(hue, "hue", 0.0, (-0.5, 0.5)),
        }
        if order not in ("random", "fixed"):
            raise UserValueError(f"ColorJitter: order must be 'random' or 'fixed', got {order!r}")
        self.order = order
        self.enabled = [i for i, op in enumerate(OPS) if self.ranges[op] is not None]

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """Four order keys (the enabled ops sorted by theirs: a uniform random order, as
        torchvision's ``randperm``) and four factors, always, so the columns never shift."""
        b = len(rng)
        keys = rng.uniform(len(OPS))[:, self.enabled]
        u = rng.uniform(len(OPS))
        ids = np.asarray(self.enabled, dtype=np.int64)
        if self.order == "random":
            order = ids[np.argsort(keys, axis=1, kind="stable")]
        else:
            order = np.broadcast_to(ids, (b, len(ids))).copy()
        params: Params = {"order": torch.from_numpy(np.ascontiguousarray(order))}
        for i, (op, ident) in enumerate(zip(OPS, _IDENTITY, strict=True)):
            span = self.ranges[op]
            values = (np.full(b, ident) if span is None
                      else span[0] + u[:, i] * (span[1] - span[0]))
            params[op] = torch.from_numpy(values.astype(np.float32))
        return params

    def apply(self, batch: Batch, params: Params) -> Batch:
        """``ApplyContext.full`` (:func:`~npu_data.transforms.base.context_of`): Compose
        knows every sample fills the batch (after a crop)."""
        order = params["order"] if self.order == "random" else None
        out = dict(batch)
        out["image"] = F.color_jitter(batch["image"], batch["sizes"], self.enabled, order,
                                      params["brightness"], params["contrast"],
                                      params["saturation"], params["hue"],
                                      full=context_of(self).full)
        return out

    def riders(self, params: Params, ctx: ApplyContext, shape: tuple[int, int, int]
               ) -> dict[str, torch.Tensor]:
        """The steps' parameters and blend products (``functional.color_jitter_riders``)."""
        order = params["order"] if self.order == "random" else None
        return F.color_jitter_riders(shape, self.enabled, order, params["brightness"],
                                     params["contrast"], params["saturation"], params["hue"],
                                     full=ctx.full)

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        fns = {
            "brightness": reference.adjust_brightness,
            "contrast": reference.adjust_contrast,
            "saturation": reference.adjust_saturation,
            "hue": reference.adjust_hue,
        }
        for op_id in params["order"][index].tolist():
            op = OPS[int(op_id)]
            image = fns[op](image, float(params[op][index]))
        return image

