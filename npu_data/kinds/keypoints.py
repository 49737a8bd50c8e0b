"""Keypoints (``keypointlabels``): percent x, y and a size in percent of the width."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from npu_data.kinds.base import COMMON, F32, F64, I32, Batch, Kind, row_sample, valid
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    GeometryKernels,
    GeometryWarp,
    ResultBatch,
    RowsT,
    ValueChecks,
)

if TYPE_CHECKING:
    import torch


class Keypoints(Kind):
    def check(self, c: ValueChecks) -> None:
        c.required_numbers(("x", "y"))
        c.numbers("width", required=False, nonneg=True)
        c.labels("keypointlabels")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        xys = R.float_cols(b.val, ("x", "y", "width"), (R.NAN, R.NAN, 0.0))
        xys = R.in_range(ctx, xys, ("x", "y", "width"), "keypoint", b)
        src, lab = R.labels(ctx, b, "keypointlabels")
        rows = R.common(self.name, b, src)
        xys = R.pick(xys, src)
        rows.fixed["xy"] = xys[:, :2]
        rows.fixed["size"] = xys[:, 2]
        rows.fixed["label"] = lab
        return rows

    def to_percent(self, column: str, a: np.ndarray, w: np.ndarray,
                   h: np.ndarray) -> np.ndarray:
        return a * (100.0 / w) if column == "size" else super().to_percent(column, a, w, h)

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        s = canvas.scale
        for j, (x, y) in enumerate(np.asarray(sample.get("keypoints.xy", np.zeros((0, 2))))):
            colour = canvas.colour(sample["keypoints.label"][j])
            r = max(3.0, float(sample["keypoints.size"][j]) * s / 2)
            canvas.draw.ellipse((x * s - r, y * s - r, x * s + r, y * s + r), outline=colour,
                                width=canvas.width)
            canvas.text((x * s + r, y * s), canvas.name(sample, self.name, j), colour)

    def to_pixels(self, cols: Mapping[str, np.ndarray], heights: np.ndarray,
                  widths: np.ndarray) -> dict[str, np.ndarray]:
        k = row_sample(cols["keypoints.offsets"])
        xy = cols["keypoints.xy"].reshape(-1, 2)
        return {"keypoints.xy": np.stack([xy[:, 0] * widths[k] / 100.0,
                                          xy[:, 1] * heights[k] / 100.0], axis=1).astype(F32),
                "keypoints.size": (cols["keypoints.size"] * widths[k] / 100.0).astype(F32)}

    def resized_crop(self, batch: Batch, crop_boxes: torch.Tensor, out_size: tuple[int, int],
                     min_visible: float, G: GeometryKernels) -> Batch:
        if "keypoints.xy" not in batch:
            return {}
        kp = batch["keypoints.xy"]
        xy, keep = G.resized_crop_keypoints(kp, valid(batch, "keypoints", kp), crop_boxes,
                                            out_size)
        return {"keypoints.xy": xy, "keypoints.valid": keep}

    def hflip(self, batch: Batch, widths: torch.Tensor, flip: torch.Tensor,
              G: GeometryKernels) -> Batch:
        if "keypoints.xy" not in batch:
            return {}
        return {"keypoints.xy": G.hflip_points(batch["keypoints.xy"], widths, flip)}

    def warp(self, batch: Batch, W: GeometryWarp, G: GeometryKernels) -> Batch:
        if "keypoints.xy" not in batch:
            return {}
        kp = batch["keypoints.xy"]
        xy, keep = W.keypoints(kp, valid(batch, "keypoints", kp))
        return {"keypoints.xy": xy, "keypoints.valid": keep}


KIND = Keypoints(
    name="keypoints", result_types=("keypointlabels", "keypoint"),
    fixed={**COMMON, "xy": (F64, (2,)), "size": (F64, ()), "label": (I32, ())},
    pixel={"xy": (2,), "size": ()}, row_key="xy",
)
