"""Choices (``choices``): one row per chosen label."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from npu_data.kinds.base import COMMON, I32, Kind
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)


class Choices(Kind):
    def check(self, c: ValueChecks) -> None:
        c.strings("choices")

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        for j in range(len(sample.get("choices.label", ()))):
            canvas.note(canvas.name(sample, self.name, j) or "?",
                        canvas.colour(sample["choices.label"][j]))

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        src, names = R.listed_rows(b, "choices")
        rows = R.common(self.name, b, src)
        rows.fixed["label"] = np.asarray(ctx.label_ids(rows.fixed["control"], names), np.int32)
        return rows


KIND = Choices(name="choices", result_types=("choices",), fixed={**COMMON, "label": (I32, ())},
            row_key="label")
