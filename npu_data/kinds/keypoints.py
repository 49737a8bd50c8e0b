"""Keypoints (``keypointlabels``): percent x, y and a size in percent of the width."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from npu_data.kinds import geometry
from npu_data.kinds.base import COMMON, F64, I32, Kind
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)


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

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        s = canvas.scale
        for j, (x, y) in enumerate(np.asarray(sample.get("keypoints.xy", np.zeros((0, 2))))):
            colour = canvas.colour(sample["keypoints.label"][j])
            r = max(3.0, float(sample["keypoints.size"][j]) * s / 2)
            canvas.draw.ellipse((x * s - r, y * s - r, x * s + r, y * s + r), outline=colour,
                                width=canvas.width)
            canvas.text((x * s + r, y * s), canvas.name(sample, self.name, j), colour)


KIND = Keypoints(
    name="keypoints", result_types=("keypointlabels", "keypoint"),
    fixed={**COMMON, "xy": (F64, (2,)), "size": (F64, ()), "label": (I32, ())},
    pixel={"xy": (2,), "size": ()}, row_key="xy", geometry=geometry.Keypoints("xy"),
)
