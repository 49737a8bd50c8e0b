"""Texts (``textarea``): one row per string; a sample's first is its ``caption``."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, Kind

KIND = Kind(name="texts", result_types=("textarea",), fixed={**COMMON}, text=("rid", "text"))
