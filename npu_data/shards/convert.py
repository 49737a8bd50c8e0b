"""Percent annotations of a table -> pixel columns of the stored images (vectorised)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from npu_data.annotations.table import AnnotationTable
from npu_data.shards.format import F32


def _row_sample(offsets: np.ndarray) -> np.ndarray:
    """Sample index of every row of a group."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def box_pixels(xywhr: np.ndarray, w: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, ...]:
    """(xywhr px, corners (N,4,2), xyxy envelope) of percent boxes on images of size w x h.

    Corners follow Label Studio: the top-left corner is fixed and the box turns clockwise by
    ``rotation`` degrees; percent is converted to pixels before rotating.
    """
    x = xywhr[:, 0] * w / 100.0
    y = xywhr[:, 1] * h / 100.0
    bw = xywhr[:, 2] * w / 100.0
    bh = xywhr[:, 3] * h / 100.0
    rad = np.deg2rad(xywhr[:, 4])
    c, s = np.cos(rad), np.sin(rad)
    cx = np.stack([x, x + bw * c, x + bw * c - bh * s, x - bh * s], axis=1)
    cy = np.stack([y, y + bw * s, y + bw * s + bh * c, y + bh * c], axis=1)
    corners = np.stack([cx, cy], axis=2)
    xyxy = np.stack([cx.min(1), cy.min(1), cx.max(1), cy.max(1)], axis=1)
    px = np.stack([x, y, bw, bh, xywhr[:, 4]], axis=1)
    return px.astype(F32), corners.astype(F32), xyxy.astype(F32)


def resize_masks(table: AnnotationTable, heights: np.ndarray,
                 widths: np.ndarray) -> dict[str, np.ndarray]:
    """Mask bits re-packed at each sample's stored size (nearest-neighbour when it differs)."""
    cols = table.columns
    rows = _row_sample(cols["masks.offsets"])
    mh, mw = cols["masks.height"], cols["masks.width"]
    boff, bits = cols["masks.bit_offsets"], cols["masks.bits"]
    parts: list[np.ndarray] = []
    for j, s in enumerate(rows):
        H, W = int(heights[s]), int(widths[s])
        n = int(mh[j]) * int(mw[j])
        flat = np.unpackbits(bits[int(boff[j]):int(boff[j + 1])], count=n)
        mask: np.ndarray = flat.reshape(int(mh[j]), int(mw[j]))
        if mask.shape != (H, W):
            img = Image.fromarray(mask * np.uint8(255)).resize((W, H), Image.Resampling.NEAREST)
            mask = (np.asarray(img) > 127).astype(np.uint8)
        parts.append(np.packbits(mask.reshape(-1)))
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    offs = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    packed = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return {"masks.bits": packed, "masks.bit_offsets": offs,
            "masks.height": heights[rows].astype("<i4"), "masks.width": widths[rows].astype("<i4")}


def to_pixels(table: AnnotationTable, heights: np.ndarray,
              widths: np.ndarray) -> dict[str, np.ndarray]:
    """All columns of ``table`` with geometry in pixels of images ``heights`` x ``widths``."""
    cols = dict(table.columns)
    H = heights.astype(np.float64)
    W = widths.astype(np.float64)
    r = _row_sample(cols["boxes.offsets"])
    cols["boxes.xywhr"], cols["boxes.corners"], cols["boxes.xyxy"] = box_pixels(
        cols["boxes.xywhr"].reshape(-1, 5), W[r], H[r])
    poly = _row_sample(cols["polygons.offsets"])
    pt = poly[_row_sample(cols["polygons.point_offsets"])]
    pts = cols["polygons.points"].reshape(-1, 2)
    cols["polygons.points"] = np.stack([pts[:, 0] * W[pt] / 100.0,
                                        pts[:, 1] * H[pt] / 100.0], axis=1).astype(F32)
    k = _row_sample(cols["keypoints.offsets"])
    xy = cols["keypoints.xy"].reshape(-1, 2)
    cols["keypoints.xy"] = np.stack([xy[:, 0] * W[k] / 100.0, xy[:, 1] * H[k] / 100.0],
                                    axis=1).astype(F32)
    cols["keypoints.size"] = (cols["keypoints.size"] * W[k] / 100.0).astype(F32)
    e = _row_sample(cols["ellipses.offsets"])
    p = cols["ellipses.params"].reshape(-1, 5)
    cols["ellipses.params"] = np.stack([p[:, 0] * W[e] / 100.0, p[:, 1] * H[e] / 100.0,
                                        p[:, 2] * W[e] / 100.0, p[:, 3] * H[e] / 100.0,
                                        p[:, 4]], axis=1).astype(F32)
    cols.update(resize_masks(table, heights, widths))
    cols["width"] = widths.astype("<i4")
    cols["height"] = heights.astype("<i4")
    return cols
