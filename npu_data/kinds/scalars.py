"""Scalars (``rating``, ``number``): ``kind`` (index in ``SCALAR_KINDS``) and ``value``."""

from __future__ import annotations

from npu_data.kinds.base import COMMON, F64, U8, Kind

SCALAR_KINDS = ("rating", "number")

KIND = Kind(name="scalars", result_types=("rating", "number"),
            fixed={**COMMON, "kind": (U8, ()), "value": (F64, ())}, row_key="value")
