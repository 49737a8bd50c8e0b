"""Scalars (``rating``, ``number``): ``kind`` (index in ``SCALAR_KINDS``) and ``value``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from npu_data.kinds.base import COMMON, F64, U8, Kind
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)

SCALAR_KINDS = ("rating", "number")


class Scalars(Kind):
    def check(self, c: ValueChecks) -> None:
        for i, (r, v) in enumerate(zip(c.res, c.vals, strict=True)):
            key = "rating" if r.get("type") == "rating" or "rating" in v else "number"
            c.number(i, key, v.get(key, c.MISSING), True, False)

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        for j, v in enumerate(np.asarray(sample.get("scalars.value", np.zeros(0)))):
            canvas.note(f"{canvas.control(sample, self.name, j)}: {float(v):g}", (255, 255, 255))

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        kinds = [0 if r.get("type") == "rating" or "rating" in v else 1
                 for r, v in zip(b.res, b.val, strict=True)]
        vals = [R.to_float(v.get("rating" if k == 0 else "number"))
                for v, k in zip(b.val, kinds, strict=True)]
        rows = R.common(self.name, b, None)
        rows.fixed["kind"] = np.asarray(kinds, np.uint8)
        rows.fixed["value"] = np.asarray(vals, np.float64)
        return rows


KIND = Scalars(name="scalars", result_types=("rating", "number"),
            fixed={**COMMON, "kind": (U8, ()), "value": (F64, ())}, row_key="value")
