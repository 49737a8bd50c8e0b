"""Taxonomy (``taxonomy``): one row per chosen path, a JSON list of strings."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import orjson

from npu_data.kinds.base import COMMON, Kind

if TYPE_CHECKING:
    from npu_data.annotations.builders import Rows
    from npu_data.annotations.checks import Check
    from npu_data.annotations.results import Batch as ResultBatch
    from npu_data.annotations.results import Context


class Taxonomy(Kind):
    def check(self, c: Check) -> None:
        c.paths("taxonomy")

    def extract(self, ctx: Context, b: ResultBatch, R: ModuleType) -> Rows:
        b = R.valid_rows(ctx, b, self)
        src: list[int] = []
        out: list[str] = []
        for i, v in enumerate(b.val):
            for path in R.listed(v.get("taxonomy")):
                src.append(i)
                out.append(orjson.dumps([R.as_text(p) for p in R.listed(path)]).decode())
        rows = R.common(self.name, b, np.asarray(src, np.int64))
        rows.text["path"] = R.encode_texts(out)
        return rows


KIND = Taxonomy(name="taxonomy", result_types=("taxonomy",), fixed={**COMMON}, text=("rid", "path"),
                json_text=("path",))
