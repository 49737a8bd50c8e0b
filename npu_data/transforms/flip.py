"""RandomHorizontalFlip: each sample mirrored with probability ``p``, geometry included."""

from __future__ import annotations

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms import geometry
from npu_data.transforms.base import Batch, Params, Trait, Transform, context_of
from npu_data.transforms.draws import Uniforms


class RandomHorizontalFlip(Transform):
    """Mirror each sample's valid image (and its boxes, polygons, keypoints, masks) with
    probability ``p``, independently per sample.

    Args:
        p: The probability, in [0, 1].

    Raises:
        UserError: ``p`` is not a probability.
    """

    traits = frozenset({Trait.HFLIP})

    def __init__(self, p: float = 0.5) -> None:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"flip": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        """``ApplyContext.pixels`` False (:func:`~npu_data.transforms.base.context_of`):
        Compose folded the image flip into an earlier crop; the geometry is mirrored here
        all the same."""
        flip = params["flip"].to(torch.bool)
        out = dict(batch)
        if context_of(self).pixels:
            out["image"] = F.hflip(batch["image"], batch["sizes"], flip)
        out.update(geometry.hflip_geometry(batch, batch["sizes"][:, 1], flip))
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        return reference.hflip(image) if bool(params["flip"][index]) else image

