"""Normalize: the last step of a pipeline, uint8 to normalised floats."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import Batch, Params, Trait, Transform
from npu_data.transforms.draws import Uniforms

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _per_channel(value: float | Sequence[float], what: str, who: str) -> tuple[float, ...]:
    """A per-channel tuple; one number stands for all three channels."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (float(value),) * 3
    try:
        return tuple(float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError) as e:
        error = UserTypeError if isinstance(e, TypeError) else UserValueError
        raise error(f"{who}: {what} must be a number or one number per channel, got "
                    f"{value!r}") from None


class Normalize(Transform):
    """uint8 -> ``(x / 255 - mean) / std`` in ``dtype``. Put it last: it ends the uint8 part
    of a pipeline. ``Normalize(0.5, 0.5, dtype=torch.bfloat16)`` gives diffusion models'
    [-1, 1] inputs.

    Args:
        mean: One value per channel, or one number for all three (default ImageNet's).
        std: One value per channel, or one number for all three, each > 0 (default
            ImageNet's). Both finite.
        dtype: The output's floating-point dtype.
        channels_last: Give the output ``torch.channels_last`` memory format.

    Raises:
        UserError: ``mean`` / ``std`` not numbers, NaN or infinite, of different lengths, a
            ``std`` <= 0, or a ``dtype`` that is not floating point.
    """

    traits = frozenset({Trait.PER_PIXEL})  # per channel

    def __init__(
        self,
        mean: float | Sequence[float] = IMAGENET_MEAN,
        std: float | Sequence[float] = IMAGENET_STD,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
    ) -> None:
        self.mean = _per_channel(mean, "mean", self.name)
        self.std = _per_channel(std, "std", self.name)
        if len(self.mean) != len(self.std) or not self.mean:
            raise UserValueError(
                f"{self.name}: mean and std need one value per channel, got {len(self.mean)} "
                f"and {len(self.std)}"
            )
        if not all(math.isfinite(v) for v in self.mean + self.std):
            raise UserValueError(
                f"{self.name}: mean and std must be finite numbers, got mean={self.mean}, "
                f"std={self.std} — pass the dataset's per-channel statistics, e.g. (0.5, 0.5)"
            )
        if any(s <= 0 for s in self.std):
            raise UserValueError(f"{self.name}: std values must be > 0, got {self.std}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise UserValueError(f"{self.name}: dtype must be a float dtype, got {dtype!r}")
        self.dtype = dtype
        self.channels_last = bool(channels_last)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        image = batch["image"]
        if image.shape[1] != len(self.mean):
            raise UserError(
                f"{self.name}: images have {image.shape[1]} channels but mean/std have "
                f"{len(self.mean)} values"
            )
        out = dict(batch)
        out["image"] = F.normalize(image, self.mean, self.std, self.dtype, self.channels_last)
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        return np.asarray(reference.normalize(image, self.mean, self.std, channels_last=True))

