"""FixedSizeCrop: the crop-and-pad of torchvision's LSJ detection recipe.

torchvision keeps it in ``references/detection/transforms.py`` (``FixedSizeCrop``, the LSJ
preset's second step after ``ScaleJitter``): each image cropped to ``min(h, H) x min(w, W)``
at ``top = int(max(h - H, 0) * r)``, ``left = int(max(w - W, 0) * r)`` with ONE uniform ``r``
for both, then padded at the bottom and right to ``H x W`` with ``fill`` (masks with 0). Boxes
are shifted and clipped; those left with no width or height are dropped (marked invalid
here). Integer moves: the pixels are exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from npu_data.transforms import functional as F
from npu_data.transforms.base import Batch, Params, Transform, pair
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.maps import check_fill, translation_matrices
from npu_data.transforms.warp_geometry import Warp, warp_geometry

__all__ = ["FixedSizeCrop"]


def _host(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C").reshape(-1, 2))


class FixedSizeCrop(Transform):
    """torchvision's detection ``FixedSizeCrop``: crop each image to at most ``size`` at a
    random place (one draw for both axes), pad it to ``size`` at the bottom and right with
    ``fill`` (module doc); the batch is ``size``.

    Args:
        size: The output (height, width), or one int for both.
        fill: The padding colour (int or three ints 0..255); the LSJ preset's is the
            ImageNet mean ``(123, 117, 104)``.

    Raises:
        UserError: A bad size or fill.
    """

    def __init__(self, size: int | Sequence[int], fill: int | Sequence[int] = 0) -> None:
        self.size = pair(size, "size", self.name)
        self.fill = check_fill(fill, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """One draw per sample: ``r``; the crop's place ``int(max(side - size, 0) * r)`` per
        axis, in torchvision's float32 arithmetic."""
        r = rng.uniform(1)[:, 0].astype(np.float32)
        crop = np.asarray(self.size, np.int64)[None]
        over = np.maximum(sizes - crop, 0).astype(np.float32)
        place = (over * r[:, None]).astype(np.int64)
        b = len(sizes)
        return {"offset": _host(place), "out": _host(np.repeat(crop, b, 0)),
                "sizes": _host(sizes)}

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.size, np.int64), np.shape(sizes)).copy()

    def apply(self, batch: Batch, params: Params) -> Batch:
        drawn = params.get("sizes")
        sizes = drawn if drawn is not None else batch["sizes"].to("cpu")
        place = params["offset"].numpy()
        m = translation_matrices(-place[:, 0], -place[:, 1])
        out = dict(batch)
        out["image"] = F.warp(batch["image"], sizes, m, "nearest", self.fill,
                              params["out"].numpy(), self.size)
        dev = batch["sizes"].device
        out["sizes"] = params["out"].to(batch["sizes"].dtype).to(dev, non_blocking=True)
        out.update(warp_geometry(batch, Warp.from_inverse(m, sizes, params["out"], self.size,
                                                          0.0)))
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        top, left = (int(v) for v in params["offset"][index].tolist())
        h, w = image.shape[:2]
        ch, cw = min(h, self.size[0]), min(w, self.size[1])
        cropped = RG.crop(image, top, left, ch, cw)
        return RG.pad(cropped, 0, 0, self.size[0], self.size[1], self.fill)

