"""Relations (``relation``): region id to region id, a direction and labels (``control`` -1)."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, U8, Kind

RELATION_DIRECTIONS = ("right", "left", "bi")

KIND = Kind(name="relations", result_types=("relation",), fixed={**COMMON, "direction": (U8, ())},
            text=("rid", "from_rid", "to_rid", "labels"), top_level=True)
