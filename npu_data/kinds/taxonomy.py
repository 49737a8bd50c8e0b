"""Taxonomy (``taxonomy``): one row per chosen path, a JSON list of strings."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, Kind

KIND = Kind(name="taxonomy", result_types=("taxonomy",), fixed={**COMMON}, text=("rid", "path"))
