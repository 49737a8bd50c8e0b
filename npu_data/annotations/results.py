"""Vectorised extraction of one chunk's result items, per kind, into group rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson

from npu_data.annotations.builders import Rows, encode_texts
from npu_data.annotations.rle import RLEError, rle_to_mask
from npu_data.annotations.table import RELATION_DIRECTIONS, ranges_index

# result type -> (kind, label keys)
KINDS: dict[str, str] = {
    "rectanglelabels": "box", "rectangle": "box", "polygonlabels": "polygon",
    "polygon": "polygon", "keypointlabels": "keypoint", "keypoint": "keypoint",
    "ellipselabels": "ellipse", "ellipse": "ellipse", "brushlabels": "mask", "brush": "mask",
    "choices": "choice", "textarea": "text", "taxonomy": "taxonomy", "rating": "scalar",
    "number": "scalar", "relation": "relation",
}
GROUP_OF = {"box": "boxes", "polygon": "polygons", "keypoint": "keypoints",
            "ellipse": "ellipses", "mask": "masks", "choice": "choices", "text": "texts",
            "taxonomy": "taxonomy", "scalar": "scalars", "relation": "relations"}
LABEL_KEYS = {"box": "rectanglelabels", "polygon": "polygonlabels", "keypoint": "keypointlabels",
              "ellipse": "ellipselabels", "mask": "brushlabels"}
NAN = float("nan")

# One item: (sample, slot, annotation, source, control, rid, result, value, prediction score)
Item = tuple[int, int, int, int, int, str, dict, dict, Any]


def infer_type(value: dict) -> str | None:
    """The result type of a value dict without ``type`` (JSON_MIN, generic ``labels``)."""
    for key in ("rectanglelabels", "polygonlabels", "keypointlabels", "ellipselabels",
                "brushlabels", "choices", "taxonomy", "rating", "number"):
        if key in value:
            return key
    if "rle" in value:
        return "brushlabels"
    if "points" in value:
        return "polygonlabels"
    if "radiusX" in value:
        return "ellipselabels"
    if "x" in value and "y" in value:
        return "rectanglelabels" if "height" in value else "keypointlabels"
    if "text" in value and "start" not in value:
        return "textarea"
    return None


class Context:
    """What extraction needs from the parser: label ids, rejection, clipping policy."""

    def __init__(self, label_id: Callable[[int, str], int], clip: bool) -> None:
        self.label_id = label_id
        self.clip = clip
        self.clipped = 0
        self.bad: dict[int, str] = {}  # sample -> first reason
        self.unknown: dict[str, int] = {}

    def reject(self, sample: int, reason: str) -> None:
        self.bad.setdefault(sample, reason)


def _floats(dicts: Sequence[dict], key: str, default: float = NAN) -> np.ndarray:
    vals = [d.get(key, default) for d in dicts]
    try:
        return np.asarray(vals, dtype=np.float64).reshape(len(vals))
    except (TypeError, ValueError):
        return np.asarray([_to_float(v) for v in vals], dtype=np.float64)


def _to_float(v: Any) -> float:
    try:
        return float(v) if not isinstance(v, bool) else NAN
    except (TypeError, ValueError):
        return NAN


def _check(ctx: Context, arr: np.ndarray, names: Sequence[str], what: str,
           items: Sequence[Item], rows_item: np.ndarray | None = None,
           lo: float = 0.0, hi: float = 100.0) -> np.ndarray:
    """Clip (and count) or reject values of ``arr`` (n, k) outside [lo, hi] or not finite."""
    bad = ~(np.isfinite(arr) & (arr >= lo) & (arr <= hi))
    if not bad.any():
        return arr
    if ctx.clip:
        ctx.clipped += int(bad.sum())
        return np.clip(np.nan_to_num(arr, nan=lo, posinf=hi, neginf=lo), lo, hi)
    for i in np.flatnonzero(bad.any(axis=1)).tolist():
        j = int(np.flatnonzero(bad[i])[0])
        it = items[int(rows_item[i]) if rows_item is not None else i]
        ctx.reject(it[0], f"{what} result {it[5]!r}: {names[j]}={float(arr[i, j]):g} is outside "
                          f"{lo:g}..{hi:g} (use out_of_range='clip' to clip)")
    return arr


def _angle(ctx: Context, arr: np.ndarray, what: str, items: Sequence[Item]) -> np.ndarray:
    """Rotation in degrees: a non-finite value becomes 0 (counted) or rejects the task."""
    bad = ~np.isfinite(arr)
    if not bad.any():
        return arr[:, None]
    if ctx.clip:
        ctx.clipped += int(bad.sum())
        return np.where(bad, 0.0, arr)[:, None]
    for i in np.flatnonzero(bad).tolist():
        ctx.reject(items[i][0], f"{what} result {items[i][5]!r}: rotation={float(arr[i]):g} is not "
                                "finite (use out_of_range='clip' to set it to 0)")
    return arr[:, None]


def _common(group: str, items: Sequence[Item], src: np.ndarray) -> Rows:
    rows = Rows(group)
    cols = list(zip(*items, strict=True)) if items else [()] * 9
    rows.sample = np.asarray(cols[0], np.int64)[src]
    rows.slot = np.asarray(cols[1], np.int64)[src]
    rows.fixed["annotation"] = np.asarray(cols[2], np.int64)[src]
    rows.fixed["source"] = np.asarray(cols[3], np.uint8)[src]
    rows.fixed["control"] = np.asarray(cols[4], np.int16)[src]
    rids = list(cols[5])
    rows.text["rid"] = encode_texts([rids[i] for i in src.tolist()])
    return rows


def _labels(ctx: Context, items: Sequence[Item], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Row -> item index, and label ids (one row per label; -1 for an item without one)."""
    src: list[int] = []
    lab: list[int] = []
    label_id = ctx.label_id
    single = True
    for i, it in enumerate(items):
        labs = it[7].get(key)
        if labs.__class__ is list and len(labs) == 1 and labs[0].__class__ is str:
            lab.append(label_id(it[4], labs[0]))
            if not single:
                src.append(i)
            continue
        if single:  # switch to explicit row indices
            src = list(range(i))
            single = False
        if labs is None:
            labs = it[7].get("labels")
        if isinstance(labs, str):
            labs = [labs]
        if not labs or not isinstance(labs, list):
            src.append(i)
            lab.append(-1)
            continue
        for name in labs:
            src.append(i)
            lab.append(label_id(it[4], str(name)))
    if single:
        return np.arange(len(items), dtype=np.int64), np.asarray(lab, np.int32)
    return np.asarray(src, np.int64), np.asarray(lab, np.int32)


def _scores(items: Sequence[Item]) -> np.ndarray:
    return np.asarray([_to_float(it[6].get("score", it[8])) if it[6].get("score", it[8])
                       is not None else NAN for it in items], np.float32)


def boxes(ctx: Context, items: Sequence[Item]) -> Rows:
    vals = [it[7] for it in items]
    xywh = np.stack([_floats(vals, k) for k in ("x", "y", "width", "height")], axis=1)
    xywh = _check(ctx, xywh, ("x", "y", "width", "height"), "rectangle", items)
    rot = _angle(ctx, _floats(vals, "rotation", 0.0), "rectangle", items)
    src, lab = _labels(ctx, items, "rectanglelabels")
    rows = _common("boxes", items, src)
    rows.fixed["xywhr"] = np.concatenate([xywh, rot], axis=1)[src]
    rows.fixed["label"] = lab
    rows.fixed["score"] = _scores(items)[src]
    return rows


def keypoints(ctx: Context, items: Sequence[Item]) -> Rows:
    vals = [it[7] for it in items]
    xys = np.stack([_floats(vals, "x"), _floats(vals, "y"), _floats(vals, "width", 0.0)], 1)
    xys = _check(ctx, xys, ("x", "y", "width"), "keypoint", items)
    src, lab = _labels(ctx, items, "keypointlabels")
    rows = _common("keypoints", items, src)
    rows.fixed["xy"] = xys[src, :2]
    rows.fixed["size"] = xys[src, 2]
    rows.fixed["label"] = lab
    return rows


def ellipses(ctx: Context, items: Sequence[Item]) -> Rows:
    vals = [it[7] for it in items]
    p = np.stack([_floats(vals, k) for k in ("x", "y", "radiusX", "radiusY")], axis=1)
    p = _check(ctx, p, ("x", "y", "radiusX", "radiusY"), "ellipse", items)
    rot = _angle(ctx, _floats(vals, "rotation", 0.0), "ellipse", items)
    src, lab = _labels(ctx, items, "ellipselabels")
    rows = _common("ellipses", items, src)
    rows.fixed["params"] = np.concatenate([p, rot], axis=1)[src]
    rows.fixed["label"] = lab
    return rows


def _point(p: Any) -> tuple[float, float]:
    if isinstance(p, (list, tuple)) and len(p) >= 2:
        return _to_float(p[0]), _to_float(p[1])
    return NAN, NAN


def polygons(ctx: Context, items: Sequence[Item]) -> Rows:
    plists = [it[7].get("points") or [] for it in items]
    plists = [p if isinstance(p, list) else [] for p in plists]
    lens = np.fromiter(map(len, plists), np.int64, count=len(plists))
    flat = [p for pl in plists for p in pl]
    try:
        pts = np.asarray(flat, np.float64).reshape(len(flat), 2)
    except (TypeError, ValueError):
        pts = np.asarray([_point(p) for p in flat], np.float64).reshape(len(flat), 2)
    owner = np.repeat(np.arange(len(items)), lens)
    pts = _check(ctx, pts, ("x", "y"), "polygon", items, rows_item=owner)
    src, lab = _labels(ctx, items, "polygonlabels")
    rows = _common("polygons", items, src)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    rows.nested["points"] = (pts[ranges_index(starts[src], lens[src])], lens[src])
    closed = [bool(it[7].get("closed", True)) for it in items]
    rows.fixed["closed"] = np.asarray(closed, np.uint8)[src]
    rows.fixed["label"] = lab
    return rows


def masks(ctx: Context, items: Sequence[Item]) -> Rows:
    kept: list[Item] = []
    bits: list[np.ndarray] = []
    hw: list[tuple[int, int]] = []
    for it in items:
        res, val = it[6], it[7]
        fmt = val.get("format", "rle")
        if fmt != "rle":
            ctx.unknown[f"brushlabels(format={fmt})"] = ctx.unknown.get(
                f"brushlabels(format={fmt})", 0) + 1
            continue
        h = res.get("original_height", val.get("original_height"))
        w = res.get("original_width", val.get("original_width"))
        if not isinstance(h, int) or not isinstance(w, int) or h <= 0 or w <= 0:
            ctx.reject(it[0], f"brush result {it[5]!r} has no original_width/original_height")
            continue
        try:
            mask = rle_to_mask(val.get("rle") or [], h, w)
        except (RLEError, TypeError, ValueError) as e:
            ctx.reject(it[0], f"brush result {it[5]!r}: {e}")
            continue
        kept.append(it)
        bits.append(np.packbits(mask.ravel()))
        hw.append((h, w))
    src, lab = _labels(ctx, kept, "brushlabels")
    rows = _common("masks", kept, src)
    sel = src.tolist()
    chosen = [bits[i] for i in sel]
    rows.nested["bits"] = (np.concatenate(chosen) if chosen else np.zeros(0, np.uint8),
                           np.fromiter((b.size for b in chosen), np.int64, count=len(chosen)))
    hwa = np.asarray(hw, np.int32).reshape(len(hw), 2)[src]
    rows.fixed["height"], rows.fixed["width"] = hwa[:, 0], hwa[:, 1]
    rows.fixed["label"] = lab
    return rows


def _listed(v: Any) -> list:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


def choices(ctx: Context, items: Sequence[Item]) -> Rows:
    src: list[int] = []
    lab: list[int] = []
    for i, it in enumerate(items):
        for c in _listed(it[7].get("choices")):
            src.append(i)
            lab.append(ctx.label_id(it[4], _text(c)))
    rows = _common("choices", items, np.asarray(src, np.int64))
    rows.fixed["label"] = np.asarray(lab, np.int32)
    return rows


def texts(ctx: Context, items: Sequence[Item]) -> Rows:
    src: list[int] = []
    out: list[str] = []
    for i, it in enumerate(items):
        for t in _listed(it[7].get("text")):
            src.append(i)
            out.append(_text(t))
    rows = _common("texts", items, np.asarray(src, np.int64))
    rows.text["text"] = encode_texts(out)
    return rows


def taxonomy(ctx: Context, items: Sequence[Item]) -> Rows:
    src: list[int] = []
    out: list[str] = []
    for i, it in enumerate(items):
        for path in _listed(it[7].get("taxonomy")):
            src.append(i)
            out.append(orjson.dumps([_text(p) for p in _listed(path)]).decode())
    rows = _common("taxonomy", items, np.asarray(src, np.int64))
    rows.text["path"] = encode_texts(out)
    return rows


def scalars(ctx: Context, items: Sequence[Item]) -> Rows:
    kinds = [0 if it[6].get("type") == "rating" or "rating" in it[7] else 1 for it in items]
    vals = [_to_float(it[7].get("rating" if k == 0 else "number")) for it, k in zip(items, kinds, strict=True)]
    rows = _common("scalars", items, np.arange(len(items)))
    rows.fixed["kind"] = np.asarray(kinds, np.uint8)
    rows.fixed["value"] = np.asarray(vals, np.float64)
    return rows


def relations(ctx: Context, items: Sequence[Item]) -> Rows:
    rows = _common("relations", items, np.arange(len(items)))
    rel = [it[6] for it in items]
    dirs = [RELATION_DIRECTIONS.index(d) if (d := r.get("direction", "right"))
            in RELATION_DIRECTIONS else 0 for r in rel]
    rows.fixed["direction"] = np.asarray(dirs, np.uint8)
    rows.text["from_rid"] = encode_texts([str(r.get("from_id", "")) for r in rel])
    rows.text["to_rid"] = encode_texts([str(r.get("to_id", "")) for r in rel])
    rows.text["labels"] = encode_texts(
        [orjson.dumps([_text(x) for x in _listed(r.get("labels"))]).decode() for r in rel])
    return rows


EXTRACT: dict[str, Callable[[Context, Sequence[Item]], Rows]] = {
    "box": boxes, "polygon": polygons, "keypoint": keypoints, "ellipse": ellipses,
    "mask": masks, "choice": choices, "text": texts, "taxonomy": taxonomy,
    "scalar": scalars, "relation": relations,
}
