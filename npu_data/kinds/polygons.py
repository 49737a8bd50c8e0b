"""Polygons (``polygonlabels``): percent points per polygon, ``closed`` flag.

Collate pads them into ``points (B, N, V, 2)`` with ``vertex_valid (B, N, V)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, repeat
from typing import Any

import numpy as np

from npu_data.common.ragged import offsets_of, take_runs
from npu_data.kinds import geometry
from npu_data.kinds.base import COMMON, F32, F64, I32, U8, Kind, Nested
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)


class Polygons(Kind):
    def check(self, c: ValueChecks) -> None:
        c.points()
        c.flag("closed")
        c.labels("polygonlabels")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        n = len(b)
        plists: list[Any] = list(map(dict.get, b.val, repeat("points")))
        if not (R.FAST and R.all_of_class(plists, list)):
            plists = [p if isinstance(p, list) else [] for p in (p or [] for p in plists)]
        lens = np.fromiter(map(len, plists), np.int64, count=n)
        flat = list(chain.from_iterable(plists))
        try:
            pts = np.asarray(flat, np.float64).reshape(len(flat), 2)
        except (TypeError, ValueError):
            pts = np.asarray([R.point(p) for p in flat], np.float64).reshape(len(flat), 2)
        owner = np.repeat(np.arange(n), lens)
        pts = R.in_range(ctx, pts, ("x", "y"), "polygon", b, rows_item=owner)
        src, lab = R.labels(ctx, b, "polygonlabels")
        rows = R.common(self.name, b, src)
        rows.nested["points"] = (pts, offsets_of(lens)) if src is None else take_runs(
            pts, offsets_of(lens), src)
        closed = np.fromiter(map(bool, map(dict.get, b.val, repeat("closed"), repeat(True))),
                             np.uint8, count=n)
        rows.fixed["closed"] = R.pick(closed, src)
        rows.fixed["label"] = lab
        return rows

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        off = np.asarray(sample.get("polygons.point_offsets", np.zeros(1, np.int64)))
        points = np.asarray(sample.get("polygons.points", np.zeros((0, 2))))
        for j in range(len(off) - 1):
            colour = canvas.colour(sample["polygons.label"][j])
            pts = canvas.points(points[off[j]:off[j + 1]])
            if len(pts) >= 2:
                closed = bool(sample["polygons.closed"][j])
                canvas.draw.line(pts + (pts[:1] if closed else []), fill=colour,
                                 width=canvas.width)
                canvas.text(pts[0], canvas.name(sample, self.name, j), colour)

    def unbatch(self, batch: Mapping[str, np.ndarray], i: int,
                hw: tuple[int, int]) -> dict[str, np.ndarray]:
        if "polygons.valid" not in batch:
            return {}
        keep = np.asarray(batch["polygons.valid"][i]).astype(bool)
        vv = np.asarray(batch["polygons.vertex_valid"][i])[keep].astype(bool)
        pts = np.asarray(batch["polygons.points"][i])[keep]
        out = {"polygons.points": np.concatenate([p[m] for p, m in zip(pts, vv, strict=True)])
               if len(pts) else np.zeros((0, 2), np.float32),
               "polygons.point_offsets": offsets_of(vv.sum(1))}
        for c in ("label", "control", "closed"):
            if f"polygons.{c}" in batch:
                out[f"polygons.{c}"] = np.asarray(batch[f"polygons.{c}"][i])[keep]
        return out

    def json_v1(self, cols: dict[str, Any], rows: list[dict[str, Any]],
                hw: tuple[int, int]) -> None:
        parts = [np.array(r["points"], np.float64).reshape(-1, 2) for r in rows]
        cols["polygons.points"] = np.concatenate(parts).astype(F32)
        cols["polygons.point_offsets"] = offsets_of([len(p) for p in parts])


KIND = Polygons(
    name="polygons", result_types=("polygonlabels", "polygon"),
    fixed={**COMMON, "closed": (U8, ()), "label": (I32, ())},
    nested=(Nested("points", "point_offsets", F64, (2,)),), pixel={"points": (2,)},
    row_key="label", geometry=geometry.PolygonPoints("points"),
)
