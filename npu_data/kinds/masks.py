"""Brush masks (``brushlabels``, RLE): packed bits of the H x W mask per row.

In the table the mask is at its decoded RLE size; the writer re-packs it at the stored image
size. Samples hold ``masks.mask (M, H, W) uint8``; collate pads to ``(B, M, Hmax, Wmax)``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from npu_data.common.ragged import offsets_of
from npu_data.kinds import geometry
from npu_data.kinds.base import COMMON, I32, U8, Kind, Nested, row_sample
from npu_data.kinds.geometry import unpack_mask
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    ResultBatch,
    RowsT,
    ValueChecks,
)

_SIZE = ("height", "width")  # masks.height / masks.width: the image's, not in the JSON


def resize_masks(cols: Mapping[str, np.ndarray], heights: np.ndarray,
                 widths: np.ndarray) -> dict[str, np.ndarray]:
    """Mask bits re-packed at each sample's stored size (nearest-neighbour when it differs)."""
    rows = row_sample(cols["masks.offsets"])
    mh, mw = cols["masks.height"], cols["masks.width"]
    boff, bits = cols["masks.bit_offsets"], cols["masks.bits"]
    parts: list[np.ndarray] = []
    for j, s in enumerate(rows):
        H, W = int(heights[s]), int(widths[s])
        mask = unpack_mask(bits[int(boff[j]):int(boff[j + 1])], int(mh[j]), int(mw[j]))
        if mask.shape != (H, W):
            img = Image.fromarray(mask * np.uint8(255)).resize((W, H), Image.Resampling.NEAREST)
            mask = (np.asarray(img) > 127).astype(np.uint8)
        parts.append(np.packbits(mask.reshape(-1)))
    offs = offsets_of([len(p) for p in parts])
    packed = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return {"masks.bits": packed, "masks.bit_offsets": offs,
            "masks.height": heights[rows].astype("<i4"), "masks.width": widths[rows].astype("<i4")}


def unpack_masks(bits: np.ndarray, offs: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    """(M, H, W) uint8 0/1 masks unpacked from their packed bits (stored image size)."""
    h, w = int(size[0]), int(size[1])
    m = len(offs) - 1
    out = np.zeros((m, h, w), np.uint8)
    for t in range(m):
        out[t] = unpack_mask(bits[int(offs[t]):int(offs[t + 1])], h, w)
    return out


class Masks(Kind):
    def check(self, c: ValueChecks) -> None:
        for i, v in enumerate(c.vals):  # another format string is a kind we count and skip
            fmt = v.get("format", "rle")
            if fmt.__class__ is not str:
                c.fail(i, f"field 'format' = {c.show(fmt)} is not a string")
        c.ints("rle", [i for i, v in enumerate(c.vals) if v.get("format", "rle") == "rle"])
        c.labels("brushlabels")

    def extract(self, ctx: ExtractionContext, b: ResultBatch,
                R: Extraction[RowsT]) -> RowsT:
        b = R.valid_rows(ctx, b, self)
        kept: list[int] = []
        bits: list[np.ndarray] = []
        hw: list[tuple[int, int]] = []
        for i, (res, val) in enumerate(zip(b.res, b.val, strict=True)):
            fmt = val.get("format", "rle")
            if fmt != "rle":
                ctx.unknown[f"brushlabels(format={fmt})"] = ctx.unknown.get(
                    f"brushlabels(format={fmt})", 0) + 1
                continue
            h = res.get("original_height", val.get("original_height"))
            w = res.get("original_width", val.get("original_width"))
            if h.__class__ is not int or w.__class__ is not int or h <= 0 or w <= 0:
                ctx.reject(int(b.sample[i]), f"task {ctx.task_of(int(b.sample[i]))}: brush result "
                                             f"{b.rid[i]!r} has no original_width/original_height "
                                             f"(positive integers) — fix the export")
                continue
            try:
                mask = R.rle_to_mask(val.get("rle") or [], h, w)
            except (R.RLEError, TypeError, ValueError) as e:
                ctx.reject(int(b.sample[i]), f"brush result {b.rid[i]!r}: {e}")
                continue
            kept.append(i)
            bits.append(np.packbits(mask.ravel()))
            hw.append((h, w))
        b = b.take(kept)
        src, lab = R.labels(ctx, b, "brushlabels")
        rows = R.common(self.name, b, src)
        sel = range(len(b)) if src is None else src.tolist()
        chosen = [bits[i] for i in sel]
        rows.nested["bits"] = (np.concatenate(chosen) if chosen else np.zeros(0, np.uint8),
                               offsets_of([c.size for c in chosen]))
        hwa = R.pick(np.asarray(hw, np.int32).reshape(len(hw), 2), src)
        rows.fixed["height"], rows.fixed["width"] = hwa[:, 0], hwa[:, 1]
        rows.fixed["label"] = lab
        return rows

    def to_pixels(self, cols: Mapping[str, np.ndarray], heights: np.ndarray,
                  widths: np.ndarray) -> dict[str, np.ndarray]:
        return resize_masks(cols, heights.astype(np.int64), widths.astype(np.int64))

    def stored_problem(self, col: Callable[[str], np.ndarray],
                       sizes: np.ndarray) -> str | None:
        rows = row_sample(np.asarray(col("masks.offsets")))
        hw = np.asarray(sizes, np.int64).reshape(-1, 2)[rows]
        for axis, name in enumerate(_SIZE):
            stored = np.asarray(col(f"masks.{name}"), np.int64)
            if (stored != hw[:, axis]).any():
                r = int(np.flatnonzero(stored != hw[:, axis])[0])
                return (f"mask row {r} (sample {int(rows[r])}) is {int(stored[r])} pixels "
                        f"{'high' if axis == 0 else 'wide'}, its image {int(hw[r, axis])}")
        need = (hw[:, 0] * hw[:, 1] + 7) // 8  # (bit_offsets: checked to have rows + 1)
        have = np.diff(np.asarray(col("masks.bit_offsets"), np.int64))
        if (have != need).any():
            r = int(np.flatnonzero(have != need)[0])
            return (f"mask row {r} (sample {int(rows[r])}) stores {int(have[r])} bytes of "
                    f"bits, its {int(hw[r, 0])}x{int(hw[r, 1])} image needs {int(need[r])}")
        return None

    def nested_sample(self, nest: Nested, values: np.ndarray, offsets: np.ndarray,
                      hw: tuple[int, int]) -> dict[str, np.ndarray]:
        return {"masks.mask": unpack_masks(values, offsets, hw)}

    # WebDataset JSON: ``bits`` (base64 of each mask's packed bits), the size is the image's
    def json_columns(self) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        return [(c, dt, shape) for c, (dt, shape) in self.fixed.items() if c not in _SIZE]

    def json_part(self, s: Mapping[str, Any]) -> dict[str, Any]:
        g = super().json_part(s)
        g["bits"] = [base64.b64encode(np.packbits(m.reshape(-1)).tobytes()).decode("ascii")
                     for m in s["masks.mask"]]
        return g

    def json_empty(self) -> dict[str, Any]:
        cols = super().json_empty()
        for c in _SIZE:
            cols[f"masks.{c}"] = np.zeros(0, "<i4")
            cols[f"masks.{c}"].flags.writeable = False
        cols["masks.bits"] = []
        return cols

    def json_read(self, g: Mapping[str, Any], hw: tuple[int, int]) -> dict[str, Any]:
        cols = super().json_read(g, hw)
        self._sized(cols, g["bits"], len(g["control"]), hw)
        return cols

    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        masks = np.asarray(sample.get("masks.mask", np.zeros((0, 1, 1), np.uint8)))
        for j in range(len(masks)):
            alpha = Image.fromarray((masks[j] > 0).astype(np.uint8) * 110)
            canvas.overlay(alpha, canvas.colour(sample["masks.label"][j]))

    def unbatch(self, batch: Mapping[str, np.ndarray], i: int,
                hw: tuple[int, int]) -> dict[str, np.ndarray]:
        out = super().unbatch(batch, i, hw)
        if "masks.mask" in out:
            out["masks.mask"] = out["masks.mask"][:, :hw[0], :hw[1]]
        return out

    def json_sample(self, cols: dict[str, Any], hw: tuple[int, int]) -> None:
        bits = cols.pop("masks.bits", None)
        if bits is not None:
            cols["masks.mask"] = np.zeros((len(bits), *hw), np.uint8)
            for t, b in enumerate(bits):
                cols["masks.mask"][t] = unpack_mask(b, *hw)

    def json_v1(self, cols: dict[str, Any], rows: list[dict[str, Any]],
                hw: tuple[int, int]) -> None:
        self._sized(cols, [r["bits"] for r in rows], len(rows), hw)

    def _sized(self, cols: dict[str, Any], bits: list[str], n: int,
               hw: tuple[int, int]) -> None:
        H, W = hw
        cols["masks.height"], cols["masks.width"] = np.full(n, H, "<i4"), np.full(n, W, "<i4")
        cols["masks.bits"] = [np.frombuffer(base64.b64decode(b), np.uint8) for b in bits]
        if len(cols["masks.bits"]) != n or any(len(b) != (H * W + 7) // 8
                                               for b in cols["masks.bits"]):
            raise ValueError("masks.bits: a mask is not the image's size")

    def table_nested(self, per: Sequence[Mapping[str, Any]], rows_w: np.ndarray,
                     rows_h: np.ndarray) -> dict[str, np.ndarray]:
        parts = [b for c in per for b in c["masks.bits"]]
        bits = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return {"masks.bits": bits.astype(np.uint8),
                "masks.bit_offsets": offsets_of([len(p) for p in parts])}


KIND = Masks(
    name="masks", result_types=("brushlabels", "brush"),
    fixed={**COMMON, "height": (I32, ()), "width": (I32, ()), "label": (I32, ())},
    nested=(Nested("bits", "bit_offsets", U8, (), sample="mask"),), row_key="mask",
    paint_first=True, geometry=geometry.BitMasks("mask"),
)
