"""Rectangles (``rectanglelabels``): percent x, y, w, h + rotation; corners and envelope;
``iscrowd`` (uint8, from the value's ``iscrowd``: COCO's crowd flag; 0 where absent)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from typing import Any

import numpy as np

from npu_data.kinds import geometry
from npu_data.kinds.base import (
    COMMON,
    F32,
    F64,
    I32,
    U8,
    Kind,
    percent_to_pixels,
    row_sample,
)
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)


def box_pixels(xywhr: np.ndarray, w: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, ...]:
    """(xywhr px, corners (N,4,2), xyxy envelope) of percent boxes on images of size w x h.

    Corners follow Label Studio: the top-left corner is fixed and the box turns clockwise by
    ``rotation`` degrees; percent is converted to pixels before rotating.
    """
    px = percent_to_pixels(xywhr, w, h)
    x, y, bw, bh = px[:, 0], px[:, 1], px[:, 2], px[:, 3]
    rad = np.deg2rad(xywhr[:, 4])
    c, s = np.cos(rad), np.sin(rad)
    cx = np.stack([x, x + bw * c, x + bw * c - bh * s, x - bh * s], axis=1)
    cy = np.stack([y, y + bw * s, y + bw * s + bh * c, y + bh * c], axis=1)
    corners = np.stack([cx, cy], axis=2)
    xyxy = np.stack([cx.min(1), cy.min(1), cx.max(1), cy.max(1)], axis=1)
    return px.astype(F32), corners.astype(F32), xyxy.astype(F32)


class Boxes(Kind):
    def check(self, c: ValueChecks) -> None:
        c.required_numbers(("x", "y", "width", "height"), nonneg=("width", "height"))
        c.numbers("rotation", required=False)
        c.labels("rectanglelabels")
        c.score()
        for i, v in enumerate(c.column("iscrowd")):
            if v is not c.MISSING and (v.__class__ not in (int, bool) or v not in (0, 1)):
                c.fail(i, f"field 'iscrowd' = {c.show(v)} is not 0 or 1")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        xywhr = R.float_cols(b.val, ("x", "y", "width", "height", "rotation"), (R.NAN,) * 4 + (0.0,))
        xywh = R.in_range(ctx, xywhr[:, :4], ("x", "y", "width", "height"), "rectangle", b)
        rot = R.angle(ctx, xywhr[:, 4], "rectangle", b)
        if ctx.clip:
            xywh = _inside_image(ctx, xywhr[:, :4], xywh, rot[:, 0], b)
        src, lab = R.labels(ctx, b, "rectanglelabels")
        rows = R.common(self.name, b, src)
        rows.fixed["xywhr"] = R.pick(np.concatenate([xywh, rot], axis=1), src)
        rows.fixed["label"] = lab
        rows.fixed["score"] = R.pick(R.scores(b), src)
        crowd = np.fromiter(map(dict.get, b.val, repeat("iscrowd"), repeat(0)), np.uint8,
                            count=len(b))
        rows.fixed["iscrowd"] = R.pick(crowd, src)
        return rows

    def to_pixels(self, cols: Mapping[str, np.ndarray], heights: np.ndarray,
                  widths: np.ndarray) -> dict[str, np.ndarray]:
        r = row_sample(cols["boxes.offsets"])
        px, corners, xyxy = box_pixels(cols["boxes.xywhr"].reshape(-1, 5), widths[r], heights[r])
        return {"boxes.xywhr": px, "boxes.corners": corners, "boxes.xyxy": xyxy}

    def json_v1(self, cols: dict[str, Any], rows: list[dict[str, Any]],
                hw: tuple[int, int]) -> None:
        H, W = hw  # as version 1 streams did: through percent of the JSON's size, float64
        pct = cols["boxes.xywhr"].astype(np.float64) * (100.0 / np.array([W, H, W, H, 100]))
        w, h = np.full(len(rows), float(W)), np.full(len(rows), float(H))
        cols["boxes.xywhr"], cols["boxes.corners"], cols["boxes.xyxy"] = box_pixels(pct, w, h)

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        for j, c in enumerate(np.asarray(sample.get("boxes.corners", np.zeros((0, 4, 2))))):
            colour = canvas.colour(sample["boxes.label"][j])
            pts = canvas.points(c)
            canvas.draw.polygon(pts, outline=colour, width=canvas.width)
            canvas.text(pts[0], canvas.name(sample, self.name, j), colour)


def _inside_image(ctx: ExtractionContext, raw: np.ndarray, clipped: np.ndarray,
                  rotation: np.ndarray, b: ResultBatch) -> np.ndarray:
    """Upright boxes clipped by their edges into the image (0..100%), not field by field: a
    box past the right edge keeps its left edge and loses what lies outside. A box with no
    area left inside (``x = 1e308``) rejects its task. Rotated boxes keep their fields clipped
    one by one (their corners may leave the image, as in Label Studio)."""
    upright = np.mod(rotation, 360.0) == 0
    if not upright.any():
        return clipped
    with np.errstate(over="ignore", invalid="ignore"):  # 1e308 + 1e308: inf, clipped to 100
        far = np.clip(raw[:, :2] + raw[:, 2:], 0.0, 100.0)
    out = clipped.copy()
    out[upright, 2:] = (far - clipped[:, :2])[upright]
    empty = upright & ((out[:, 2:] <= 0) & (raw[:, 2:] > 0)).any(axis=1)
    for i in np.flatnonzero(empty).tolist():
        s = int(b.sample[i])
        x, y, w, h = (float(v) for v in raw[i])
        ctx.reject(s, f"task {ctx.task_of(s)}: result {b.rid[i]!r} (rectanglelabels): the box "
                      f"x={x:g} y={y:g} width={w:g} height={h:g} (percent) lies outside the "
                      "image, nothing of it to keep — fix the export")
    ctx.clipped += int((out[upright] != clipped[upright]).any(axis=1).sum())
    return out


KIND = Boxes(
    name="boxes", result_types=("rectanglelabels", "rectangle"),
    fixed={**COMMON, "xywhr": (F64, (5,)), "label": (I32, ()), "score": (F32, ()),
           "iscrowd": (U8, ())},
    pixel={"xywhr": (5,), "corners": (4, 2), "xyxy": (4,)}, derived=("corners", "xyxy"),
    row_key="xyxy", geometry=geometry.RotatedBoxes("xyxy"), added={"iscrowd": 0},
)
