"""Choices (``choices``): one row per chosen label."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, I32, Kind

KIND = Kind(name="choices", result_types=("choices",), fixed={**COMMON, "label": (I32, ())},
            row_key="label")
