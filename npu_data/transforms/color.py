"""ColorJitter with per-sample factors and a per-sample random order of its adjustments."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserError
from npu_data.transforms import _native
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import color as K
from npu_data.transforms.draws import Draws
from npu_data.transforms.params import (
    Batch,
    Params,
    Transform,
    random_permutations,
    uniform,
)

OPS = ("brightness", "contrast", "saturation", "hue")
_IDENTITY = (1.0, 1.0, 1.0, 0.0)
_KERNELS = {
    "brightness": F.adjust_brightness,
    "contrast": F.adjust_contrast,
    "saturation": F.adjust_saturation,
    "hue": F.adjust_hue,
}


def _factor_range(
    value: float | Sequence[float] | None, name: str, center: float, bound: tuple[float, float]
) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: None when the op is disabled."""
    who = "ColorJitter"
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0 or not math.isfinite(value):
            raise UserError(f"{who}: {name}={value!r} must be a non-negative number")
        lo, hi = center - float(value), center + float(value)
        if center == 1.0:
            lo = max(lo, 0.0)
        if name == "hue" and value > 0.5:
            raise UserError(f"{who}: hue={value!r} must be in [0, 0.5]")
    elif isinstance(value, Sequence) and len(value) == 2:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError):
            raise UserError(f"{who}: {name}={value!r} must hold two numbers") from None
        if not (bound[0] <= lo <= hi <= bound[1]):
            raise UserError(
                f"{who}: {name}={tuple(value)!r} must satisfy {bound[0]} <= min <= max <= {bound[1]}"
            )
    else:
        raise UserError(f"{who}: {name} must be a number or a pair (min, max), got {value!r}")
    if lo == hi == center:
        return None
    return lo, hi


def _fused_blend(x: torch.Tensor, sizes: torch.Tensor, op: torch.Tensor, factors: torch.Tensor,
                 active: torch.Tensor) -> torch.Tensor:
    """Brightness (op 0), contrast (1) or saturation (2) per sample, where ``active``."""
    gray = K.grayscale(x)  # (B, 1, H, W) int32
    mask = K.valid_mask(sizes, x.shape[-2], x.shape[-1])
    total = torch.where(mask, gray, 0).to(torch.int64).sum(dim=(1, 2, 3))
    count = (sizes[:, 0].to(torch.int64) * sizes[:, 1].to(torch.int64)).clamp(min=1)
    mean = torch.div(2 * total + count, 2 * count, rounding_mode="floor").to(torch.int32)
    sel = op.view(-1, 1, 1, 1)
    in1 = torch.where(sel == 2, gray, torch.where(sel == 1, mean.view(-1, 1, 1, 1), 0))
    alpha = torch.gather(factors, 1, op.view(-1, 1).clamp(0, 2)).squeeze(1)
    alpha = torch.where(active, alpha, torch.ones_like(alpha))
    out = K.blend(in1.expand_as(x), x, alpha)
    # like F.adjust_contrast, contrast leaves the padding at 0
    zero_pad = (active & (op == 1)).view(-1, 1, 1, 1) & ~mask
    return torch.where(zero_pad, torch.zeros((), dtype=out.dtype, device=out.device), out)


class ColorJitter(Transform):
    """Random brightness, contrast, saturation and hue, drawn per sample (torchvision ranges).

    ``order="random"`` (default) applies the enabled adjustments in an independent random
    order per sample, as torchvision's per-image PIL path does: one hue pass plus up to six
    fused blend passes (the blends before and after each sample's hue step). ``order="fixed"`` applies brightness, contrast,
    saturation, hue in that order: one pass each.
    """

    name = "ColorJitter"

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
            raise UserError(f"ColorJitter: order must be 'random' or 'fixed', got {order!r}")
        self.order = order
        self.enabled = [i for i, op in enumerate(OPS) if self.ranges[op] is not None]

    def _draw(self, batch: Batch, generator: torch.Generator | None) -> Params:
        dev = batch["image"].device
        b = batch["image"].shape[0]
        n = len(self.enabled)
        if self.order == "random":
            perm = random_permutations(b, n, dev, generator)
        else:
            perm = torch.arange(n, device=dev).expand(b, n)
        ids = torch.tensor(self.enabled, dtype=torch.int64, device=dev)
        params: Params = {"order": ids[perm]}
        for op, ident in zip(OPS, _IDENTITY, strict=True):
            rng = self.ranges[op]
            if rng is None:
                params[op] = torch.full((b,), ident, dtype=torch.float32, device=dev)
            else:
                params[op] = uniform((b,), rng[0], rng[1], dev, generator)
        return params

    def draw(self, sizes: np.ndarray, draws: Draws) -> Params:
        """Four order keys (the enabled ops sorted by theirs: a uniform random order, as
        torchvision's ``randperm``) and four factors, always, so the columns never shift."""
        b = len(draws)
        keys = draws.uniform(len(OPS))[:, self.enabled]
        u = draws.uniform(len(OPS))
        ids = np.asarray(self.enabled, dtype=np.int64)
        if self.order == "random":
            order = ids[np.argsort(keys, axis=1, kind="stable")]
        else:
            order = np.broadcast_to(ids, (b, len(ids))).copy()
        params: Params = {"order": torch.from_numpy(np.ascontiguousarray(order))}
        for i, (op, ident) in enumerate(zip(OPS, _IDENTITY, strict=True)):
            rng = self.ranges[op]
            values = (np.full(b, ident) if rng is None else rng[0] + u[:, i] * (rng[1] - rng[0]))
            params[op] = torch.from_numpy(values.astype(np.float32))
        return params

    def _apply(self, batch: Batch, params: Params) -> Batch:
        x = batch["image"]
        sizes = batch["sizes"]
        order = params["order"]
        n = order.shape[1]
        if _native.for_tensor(x) is not None:  # compiled CPU kernels: every op in one call
            factors = torch.stack([params[op] for op in OPS[:3]], dim=1)
            x = F.color_sequence(x, sizes, order, factors, K.hue_shift(params["hue"]))
        elif n == 1 or self.order == "fixed":  # the order is known: one pass per op
            for op_id in self.enabled:
                x = _KERNELS[OPS[op_id]](x, sizes, params[OPS[op_id]])
        else:
            x = self._apply_random_order(x, sizes, order, params)
        out = dict(batch)
        out["image"] = x
        return out

    def _apply_random_order(
        self, x: torch.Tensor, sizes: torch.Tensor, order: torch.Tensor, params: Params
    ) -> torch.Tensor:
        """Per-sample order with ONE hue pass: the blends before each sample's hue step, hue,
        then the blends after it. Each blend step is one fused pass whose first image is
        chosen per sample (black, the grey mean, or the pixel's grey); factor 1 is an exact
        identity, so samples with nothing to do at a step stay unchanged."""
        b, n = order.shape
        hue_id = OPS.index("hue")
        factors = torch.stack([params[op] for op in OPS[:3]], dim=1)  # (B, 3)
        if hue_id not in self.enabled:
            for k in range(n):
                x = _fused_blend(x, sizes, order[:, k], factors, torch.ones_like(order[:, k],
                                                                               dtype=torch.bool))
            return x
        steps = torch.arange(n - 1, device=order.device).view(1, -1)
        hue_at = torch.argmax((order == hue_id).to(torch.int64), dim=1, keepdim=True)  # (B, 1)
        blends = torch.gather(order, 1, steps + (steps >= hue_at).to(steps.dtype))  # (B, n-1)
        for k in range(n - 1):  # before hue
            x = _fused_blend(x, sizes, blends[:, k], factors, k < hue_at[:, 0])
        x = F.adjust_hue(x, sizes, params["hue"])
        for k in range(n - 1):  # after hue
            x = _fused_blend(x, sizes, blends[:, k], factors, k >= hue_at[:, 0])
        return x

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms import reference

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

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v}" for k, v in self.ranges.items() if v is not None)
        return f"{self.name}({parts}, order={self.order!r})"
