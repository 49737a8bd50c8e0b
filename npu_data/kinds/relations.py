"""Relations (``relation``): region id to region id, a direction and labels (``control`` -1)."""

from __future__ import annotations

import numpy as np
import orjson

from npu_data.common.ragged import encode_texts
from npu_data.kinds.base import COMMON, U8, Kind
from npu_data.kinds.protocols import Extraction, ExtractionContext, ResultBatch, RowsT, ValueChecks

RELATION_DIRECTIONS = ("right", "left", "bi")


class Relations(Kind):
    def check(self, c: ValueChecks) -> None:
        c.text_of("from_id")
        c.text_of("to_id")
        c.one_of("direction", RELATION_DIRECTIONS)
        c.strings("labels", required=False)

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        rows = R.common(self.name, b, None)
        rel = b.res
        dirs = [RELATION_DIRECTIONS.index(d) if (d := r.get("direction", "right"))
                in RELATION_DIRECTIONS else 0 for r in rel]
        rows.fixed["direction"] = np.asarray(dirs, np.uint8)
        rows.text["from_rid"] = encode_texts([str(r.get("from_id", "")) for r in rel])
        rows.text["to_rid"] = encode_texts([str(r.get("to_id", "")) for r in rel])
        rows.text["labels"] = encode_texts(
            [orjson.dumps([R.as_text(x) for x in R.listed(r.get("labels"))]).decode() for r in rel])
        return rows


KIND = Relations(name="relations", result_types=("relation",), fixed={**COMMON, "direction": (U8, ())},
            text=("rid", "from_rid", "to_rid", "labels"), top_level=True,
            json_text=("labels",))
