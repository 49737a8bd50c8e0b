"""Ellipses (``ellipselabels``): percent centre x, y, radii x, y + rotation in degrees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from npu_data.kinds import geometry
from npu_data.kinds.base import (
    COMMON,
    F64,
    I32,
    Kind,
)
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)


def ellipse_points(params: np.ndarray, n: int = 48) -> np.ndarray:
    """(E, n, 2) outline points of ellipses ``cx, cy, rx, ry, rotation`` (degrees, clockwise)."""
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    p = np.asarray(params, dtype=np.float64).reshape(-1, 5)
    th = np.deg2rad(p[:, 4])[:, None]
    ex, ey = p[:, 2:3] * np.cos(t), p[:, 3:4] * np.sin(t)
    x = p[:, 0:1] + ex * np.cos(th) - ey * np.sin(th)
    y = p[:, 1:2] + ex * np.sin(th) + ey * np.cos(th)
    return np.stack([x, y], axis=2)


class Ellipses(Kind):
    def check(self, c: ValueChecks) -> None:
        c.required_numbers(("x", "y", "radiusX", "radiusY"), nonneg=("radiusX", "radiusY"))
        c.numbers("rotation", required=False)
        c.labels("ellipselabels")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        pr = R.float_cols(b.val, ("x", "y", "radiusX", "radiusY", "rotation"), (R.NAN,) * 4 + (0.0,))
        p = R.in_range(ctx, pr[:, :4], ("x", "y", "radiusX", "radiusY"), "ellipse", b)
        rot = R.angle(ctx, pr[:, 4], "ellipse", b)
        src, lab = R.labels(ctx, b, "ellipselabels")
        rows = R.common(self.name, b, src)
        rows.fixed["params"] = R.pick(np.concatenate([p, rot], axis=1), src)
        rows.fixed["label"] = lab
        return rows

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        params = np.asarray(sample.get("ellipses.params", np.zeros((0, 5))))
        s = canvas.scale
        for j, outline in enumerate(ellipse_points(params)):
            colour = canvas.colour(sample["ellipses.label"][j])
            canvas.draw.polygon(canvas.points(outline), outline=colour, width=canvas.width)
            canvas.text((float(params[j, 0]) * s, float(params[j, 1]) * s),
                        canvas.name(sample, self.name, j), colour)


KIND = Ellipses(
    name="ellipses", result_types=("ellipselabels", "ellipse"),
    fixed={**COMMON, "params": (F64, (5,)), "label": (I32, ())},
    pixel={"params": (5,)}, row_key="params", geometry=geometry.Ellipses("params"),
)
