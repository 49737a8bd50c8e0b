"""Percent annotations of a table -> pixel columns of the stored images (vectorised)."""

from __future__ import annotations

import numpy as np

from npu_data.annotations.table import AnnotationTable
from npu_data.kinds.registry import KINDS


def to_pixels(table: AnnotationTable, heights: np.ndarray,
              widths: np.ndarray) -> dict[str, np.ndarray]:
    """All columns of ``table`` with geometry in pixels of images ``heights`` x ``widths``
    (each kind converts its own: ``Kind.to_pixels``)."""
    cols = dict(table.columns)
    H = heights.astype(np.float64)
    W = widths.astype(np.float64)
    for kind in KINDS:
        cols.update(kind.to_pixels(table.columns, H, W))
    cols["width"] = widths.astype("<i4")
    cols["height"] = heights.astype("<i4")
    return cols
