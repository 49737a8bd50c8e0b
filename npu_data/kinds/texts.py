"""Texts (``textarea``): one row per string; a sample's first is its ``caption``."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, Kind

KIND = Kind(name="texts", result_types=("textarea",), fixed={**COMMON}, text=("rid", "text"))

CAPTION_OF = "texts.text"  # the sample key whose first string is the sample's ``caption``


def caption(strings: list[str]) -> str:
    """A sample's caption: its first text, ``""`` without one."""
    return strings[0] if strings else ""
