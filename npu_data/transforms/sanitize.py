"""SanitizeBoundingBoxes: torchvision v2's rule for the boxes a detection recipe keeps.

torchvision removes a box (and its label) whose width or height is under ``min_size``, whose
area is under ``min_area``, or with a coordinate outside its image (``v2/_misc.py``,
``_get_sanitize_bounding_boxes_mask``). A batch here keeps its rows padded, so the rule marks
those boxes invalid (``boxes.valid``), their labels with them; nothing else changes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms.base import Batch, Params, Trait, Transform
from npu_data.transforms.draws import Uniforms


def _at_least_one(value: float, what: str, who: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 1):
        raise UserValueError(f"{who}: {what} must be a number >= 1 (torchvision's rule), got "
                             f"{value!r}")
    return float(value)


def sanitize_mask(xyxy: torch.Tensor, sizes: torch.Tensor, min_size: float = 1.0,
                  min_area: float = 1.0) -> torch.Tensor:
    """``(B, N)`` bool: the boxes ``xyxy (B, N, 4)`` torchvision keeps on images of ``sizes
    (B, 2)`` (height, width): ``w >= min_size``, ``h >= min_size``, ``w * h >= min_area``,
    every coordinate ``>= 0`` and within the image. On the boxes' device, no read back."""
    x0, y0, x1, y1 = xyxy.to(torch.float32).unbind(-1)
    hw = sizes.to(xyxy.device, non_blocking=True).to(torch.float32)
    img_h, img_w = hw[:, 0:1], hw[:, 1:2]
    w, h = x1 - x0, y1 - y0
    keep = (w >= min_size) & (h >= min_size) & (w * h >= min_area)
    keep &= (x0 >= 0) & (y0 >= 0) & (x1 >= 0) & (y1 >= 0)
    return keep & (x0 <= img_w) & (x1 <= img_w) & (y0 <= img_h) & (y1 <= img_h)


class SanitizeBoundingBoxes(Transform):
    """torchvision's ``SanitizeBoundingBoxes``: boxes under ``min_size`` a side or
    ``min_area``, or outside their image, marked invalid (``boxes.valid``; module doc). The
    last stage of torchvision's detection presets, after the crops and flips; a batch without
    boxes passes unchanged.

    Args:
        min_size: The smallest width and height kept, in pixels (>= 1).
        min_area: The smallest area kept, in square pixels (>= 1).

    Raises:
        UserError: ``min_size`` or ``min_area`` under 1.
    """

    traits = frozenset({Trait.NO_PIXELS})  # widths and bounds are the same mirrored

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0) -> None:
        self.min_size = _at_least_one(min_size, "min_size", self.name)
        self.min_area = _at_least_one(min_area, "min_area", self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        xyxy = batch.get("boxes.xyxy")
        if xyxy is None:
            return batch
        keep = sanitize_mask(xyxy, batch["sizes"], self.min_size, self.min_area)
        old = batch.get("boxes.valid")
        out = dict(batch)
        out["boxes.valid"] = keep if old is None else old.to(torch.bool) & keep
        return out


