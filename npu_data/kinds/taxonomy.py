"""Taxonomy (``taxonomy``): one row per chosen path, a JSON list of strings."""

from __future__ import annotations

import numpy as np
import orjson

from npu_data.common.ragged import encode_texts
from npu_data.kinds.base import COMMON, Kind
from npu_data.kinds.protocols import Extraction, ExtractionContext, ResultBatch, RowsT, ValueChecks


class Taxonomy(Kind):
    def check(self, c: ValueChecks) -> None:
        c.paths("taxonomy")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        src: list[int] = []
        out: list[str] = []
        for i, v in enumerate(b.val):
            for path in R.listed(v.get("taxonomy")):
                src.append(i)
                out.append(orjson.dumps([R.as_text(p) for p in R.listed(path)]).decode())
        rows = R.common(self.name, b, np.asarray(src, np.int64))
        rows.text["path"] = encode_texts(out)
        return rows


KIND = Taxonomy(name="taxonomy", result_types=("taxonomy",), fixed={**COMMON}, text=("rid", "path"),
                json_text=("path",))
