"""RandomHorizontalFlip: each sample mirrored with probability ``p``, geometry included."""

from __future__ import annotations

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms import geometry
from npu_data.transforms.base import DEFAULT, ApplyContext, Batch, Params, Transform
from npu_data.transforms.draws import Uniforms


class RandomHorizontalFlip(Transform):
    """Mirror each sample's valid image (and its boxes, polygons, keypoints, masks) with
    probability ``p``, independently per sample.

    Args:
        p: The probability, in [0, 1].

    Raises:
        UserError: ``p`` is not a probability.
    """

    name = "RandomHorizontalFlip"
    is_hflip = True
    keeps_full = True
    mirror_free = True

    def __init__(self, p: float = 0.5) -> None:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"flip": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def _apply(self, batch: Batch, params: Params, ctx: ApplyContext = DEFAULT) -> Batch:
        """``ctx.pixels=False``: Compose folded the image flip into an earlier crop; the
        geometry is mirrored here all the same."""
        flip = params["flip"].to(torch.bool)
        out = dict(batch)
        if ctx.pixels:
            out["image"] = F.hflip(batch["image"], batch["sizes"], flip)
        out.update(geometry.hflip_geometry(batch, batch["sizes"][:, 1], flip))
        return out

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        return reference.hflip(image) if bool(params["flip"][index]) else image

    def __repr__(self) -> str:
        return f"{self.name}(p={self.p})"
