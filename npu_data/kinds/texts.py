"""Texts (``textarea``): one row per string; a sample's first is its ``caption``."""

from __future__ import annotations

from npu_data.common.ragged import encode_texts
from npu_data.kinds.base import COMMON, Kind
from npu_data.kinds.protocols import Extraction, ExtractionContext, ResultBatch, RowsT, ValueChecks


class Texts(Kind):
    def check(self, c: ValueChecks) -> None:
        c.strings("text")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        src, out = R.listed_rows(b, "text")
        rows = R.common(self.name, b, src)
        rows.text["text"] = encode_texts(out)
        return rows


KIND = Texts(name="texts", result_types=("textarea",), fixed={**COMMON}, text=("rid", "text"))

CAPTION_OF = "texts.text"  # the sample key whose first string is the sample's ``caption``


def caption(strings: list[str]) -> str:
    """A sample's caption: its first text, ``""`` without one."""
    return strings[0] if strings else ""
