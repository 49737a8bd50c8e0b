"""Relations (``relation``): region id to region id, a direction and labels (``control`` -1)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import orjson

from npu_data.kinds.base import COMMON, U8, Kind

if TYPE_CHECKING:
    from npu_data.annotations.builders import Rows
    from npu_data.annotations.checks import Check
    from npu_data.annotations.results import Batch as ResultBatch
    from npu_data.annotations.results import Context

RELATION_DIRECTIONS = ("right", "left", "bi")


class Relations(Kind):
    def check(self, c: Check) -> None:
        c.text_of("from_id")
        c.text_of("to_id")
        c.one_of("direction", RELATION_DIRECTIONS)
        c.strings("labels", required=False)

    def extract(self, ctx: Context, b: ResultBatch, R: ModuleType) -> Rows:
        b = R.valid_rows(ctx, b, self)
        rows = R.common(self.name, b, None)
        rel = b.res
        dirs = [RELATION_DIRECTIONS.index(d) if (d := r.get("direction", "right"))
                in RELATION_DIRECTIONS else 0 for r in rel]
        rows.fixed["direction"] = np.asarray(dirs, np.uint8)
        rows.text["from_rid"] = R.encode_texts([str(r.get("from_id", "")) for r in rel])
        rows.text["to_rid"] = R.encode_texts([str(r.get("to_id", "")) for r in rel])
        rows.text["labels"] = R.encode_texts(
            [orjson.dumps([R.as_text(x) for x in R.listed(r.get("labels"))]).decode() for r in rel])
        return rows


KIND = Relations(name="relations", result_types=("relation",), fixed={**COMMON, "direction": (U8, ())},
            text=("rid", "from_rid", "to_rid", "labels"), top_level=True,
            json_text=("labels",))
