"""Polygons (``polygonlabels``): percent points per polygon, ``closed`` flag.

Collate pads them into ``points (B, N, V, 2)`` with ``vertex_valid (B, N, V)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from npu_data.common.ragged import offsets_of, take_runs
from npu_data.kinds.base import COMMON, F32, F64, I32, U8, Batch, Kind, Nested, row_sample, valid
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    GeometryKernels,
    GeometryWarp,
    ResultBatch,
    RowsT,
    ValueChecks,
)

if TYPE_CHECKING:
    import torch


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

    def to_pixels(self, cols: Mapping[str, np.ndarray], heights: np.ndarray,
                  widths: np.ndarray) -> dict[str, np.ndarray]:
        pt = row_sample(cols["polygons.offsets"])[row_sample(cols["polygons.point_offsets"])]
        pts = cols["polygons.points"].reshape(-1, 2)
        return {"polygons.points": np.stack([pts[:, 0] * widths[pt] / 100.0,
                                             pts[:, 1] * heights[pt] / 100.0],
                                            axis=1).astype(F32)}

    def own_keys(self) -> tuple[str, ...]:
        return ("polygons.points", "polygons.point_offsets")

    def pad_samples(self, samples: Sequence[Mapping[str, Any]], counts: np.ndarray,
                    nmax: int, hw: tuple[int, int], pin: bool, batch: Batch) -> None:
        import torch

        from npu_data.buffers import zeros_host

        b = len(samples)
        offs = [np.asarray(s.get("polygons.point_offsets", np.zeros(1, np.int64)))
                for s in samples]
        vmax = max((int(np.diff(o).max()) for o in offs if len(o) > 1), default=0)
        points = zeros_host((b, nmax, vmax, 2), torch.float32, pin)
        vvalid = np.zeros((b, nmax, vmax), dtype=bool)
        pview = points.numpy()
        for i, s in enumerate(samples):
            o = offs[i]
            n = len(o) - 1
            if n <= 0:
                continue
            lens = np.diff(o)
            pts = np.asarray(s["polygons.points"], dtype=np.float32)
            poly = np.repeat(np.arange(n), lens)
            vert = np.arange(len(pts)) - np.repeat(o[:-1], lens)
            pview[i, poly, vert] = pts
            vvalid[i, poly, vert] = True
        batch["polygons.points"] = points
        batch["polygons.vertex_valid"] = torch.from_numpy(vvalid)

    def pad_columns(self, nested: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    sample: np.ndarray, slot: np.ndarray, bn: tuple[int, int],
                    sizes: Sequence[tuple[int, int]], batch: Batch) -> None:
        import torch

        values, lens = nested["polygons.points"]
        vmax = int(lens.max()) if len(lens) else 0
        points = torch.zeros((*bn, vmax, 2), dtype=torch.float32)
        vvalid = np.zeros((*bn, vmax), dtype=bool)
        poly = np.repeat(np.arange(len(lens)), lens)
        vert = np.arange(len(poly)) - np.repeat(offsets_of(lens)[:-1], lens)
        points.numpy()[sample[poly], slot[poly], vert] = np.asarray(values, dtype=np.float32)
        vvalid[sample[poly], slot[poly], vert] = True
        batch["polygons.points"] = points
        batch["polygons.vertex_valid"] = torch.from_numpy(vvalid)

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

    def pad_empty(self, b: int, hw: tuple[int, int], batch: Batch) -> None:
        import torch

        # V = 1, never 0: reductions over the vertex axis stay defined downstream
        batch["polygons.points"] = torch.zeros((b, 0, 1, 2), dtype=torch.float32)
        batch["polygons.vertex_valid"] = torch.zeros((b, 0, 1), dtype=torch.bool)

    def resized_crop(self, batch: Batch, crop_boxes: torch.Tensor, out_size: tuple[int, int],
                     min_visible: float, G: GeometryKernels) -> Batch:
        import torch

        if "polygons.points" not in batch:
            return {}
        pts = batch["polygons.points"]
        vv = batch.get("polygons.vertex_valid")
        vv = torch.ones(pts.shape[:-1], dtype=torch.bool, device=pts.device) if vv is None else vv
        points, keep = G.resized_crop_polygons(pts, vv.to(torch.bool), valid(batch, "polygons", pts),
                                               crop_boxes, out_size, min_visible)
        return {"polygons.points": points, "polygons.valid": keep}

    def hflip(self, batch: Batch, widths: torch.Tensor, flip: torch.Tensor,
              G: GeometryKernels) -> Batch:
        if "polygons.points" not in batch:
            return {}
        return {"polygons.points": G.hflip_points(batch["polygons.points"], widths, flip)}

    def warp(self, batch: Batch, W: GeometryWarp, G: GeometryKernels) -> Batch:
        import torch

        if "polygons.points" not in batch:
            return {}
        pts = batch["polygons.points"]
        vv = batch.get("polygons.vertex_valid")
        vv = torch.ones(pts.shape[:-1], dtype=torch.bool, device=pts.device) if vv is None else vv
        points, keep = W.polygons(pts, vv.to(torch.bool), valid(batch, "polygons", pts))
        return {"polygons.points": points, "polygons.valid": keep}


KIND = Polygons(
    name="polygons", result_types=("polygonlabels", "polygon"),
    fixed={**COMMON, "closed": (U8, ()), "label": (I32, ())},
    nested=(Nested("points", "point_offsets", F64, (2,)),), pixel={"points": (2,)},
    row_key="label",
)
