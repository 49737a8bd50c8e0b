"""Texts (``textarea``): one row per string; a sample's first is its ``caption``."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from npu_data.kinds.base import COMMON, Kind

if TYPE_CHECKING:
    from npu_data.annotations.builders import Rows
    from npu_data.annotations.checks import Check
    from npu_data.annotations.results import Batch as ResultBatch
    from npu_data.annotations.results import Context


class Texts(Kind):
    def check(self, c: Check) -> None:
        c.strings("text")

    def extract(self, ctx: Context, b: ResultBatch, R: ModuleType) -> Rows:
        b = R.valid_rows(ctx, b, self)
        src, out = R.listed_rows(b, "text")
        rows = R.common(self.name, b, src)
        rows.text["text"] = R.encode_texts(out)
        return rows


KIND = Texts(name="texts", result_types=("textarea",), fixed={**COMMON}, text=("rid", "text"))

CAPTION_OF = "texts.text"  # the sample key whose first string is the sample's ``caption``


def caption(strings: list[str]) -> str:
    """A sample's caption: its first text, ``""`` without one."""
    return strings[0] if strings else ""
