"""Vectorised extraction of one chunk's results, per kind, into group rows.

Each kind's results arrive as a ``Batch`` (columns in export order). Values are read with
C-level ``map`` passes; the per-result Python loops remain as the generic path, taken when a
column holds anything but the common shapes (or when ``FAST`` is off, to test one against the
other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from npu_data.annotations import checks as C
from npu_data.annotations.builders import Rows, encode_texts
from npu_data.annotations.rle import RLEError, rle_to_mask
from npu_data.annotations.table import ranges_index
from npu_data.kinds.registry import BY_NAME, OF_TYPE
from npu_data.kinds.relations import RELATION_DIRECTIONS

KINDS: dict[str, str] = {t: k.name for t, k in OF_TYPE.items()}  # result type -> kind name
NAN = float("nan")
FAST = True  # column-wise fast paths (tests switch them off to compare with the generic path)


class Batch:
    """The results of one kind in one chunk, column by column, in export order."""

    __slots__ = ("sample", "slot", "ann", "src", "control", "rid", "res", "val", "pscore")

    def __init__(self, sample: np.ndarray, slot: np.ndarray, ann: np.ndarray, src: np.ndarray,
                 control: np.ndarray, rid: list[str], res: list[dict], val: list[dict],
                 pscore: list[Any]) -> None:
        self.sample, self.slot, self.ann, self.src = sample, slot, ann, src  # int64, uint8
        self.control = control  # int16 control ids (-1 for relations)
        self.rid, self.res, self.val, self.pscore = rid, res, val, pscore

    def __len__(self) -> int:
        return len(self.res)

    def take(self, rows: list[int]) -> Batch:
        """The batch of ``rows`` (in that order)."""
        idx = np.asarray(rows, np.int64)
        return Batch(self.sample[idx], self.slot[idx], self.ann[idx], self.src[idx],
                     self.control[idx], [self.rid[i] for i in rows],
                     [self.res[i] for i in rows], [self.val[i] for i in rows],
                     [self.pscore[i] for i in rows])


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

    def __init__(self, label_id: Callable[[int, str], int],
                 label_ids: Callable[[np.ndarray, list[str]], list[int]], clip: bool) -> None:
        self.label_id = label_id
        self.label_ids = label_ids  # many at once
        self.clip = clip
        self.clipped = 0
        self.bad: dict[int, str] = {}  # sample -> first reason
        self.unknown: dict[str, int] = {}
        self.task_of: Callable[[int], Any] = lambda s: s  # sample -> task id (for reasons)

    def reject(self, sample: int, reason: str) -> None:
        self.bad.setdefault(sample, reason)

    def reject_field(self, sample: int, rid: Any, kind: str, key: str, value: Any) -> None:
        """A result's own field (``type``, ``from_name``, ``id``) holds the wrong kind of value."""
        from npu_data.annotations.checks import show

        what = "is missing" if value is None and key == "from_name" else (
            f"= {show(value)} is not a string")
        self.reject(sample, f"task {self.task_of(sample)}: result {rid!r} ({kind}): field "
                            f"{key!r} {what} — fix the export")


def _valid(ctx: Context, b: Batch, kind: str) -> Batch:
    """``b`` less the results whose values fail the checks of ``kind`` (their tasks are
    rejected, with the task id, result id, type, field and value in the reason)."""
    def fail(i: int, msg: str) -> None:
        s = int(b.sample[i])
        t = b.res[i].get("type") or BY_NAME[kind].result_types[0]
        ctx.reject(s, f"task {ctx.task_of(s)}: result {b.rid[i]!r} ({t}): {msg} "
                      "— fix the export")
    chk = C.Check(b.val, b.res, b.pscore, FAST, fail)
    CHECKS[kind](chk)
    if not chk.bad:
        return b
    return b.take([i for i in range(len(b)) if i not in chk.bad])


def _check_box(c: C.Check) -> None:
    c.required_numbers(("x", "y", "width", "height"), nonneg=("width", "height"))
    c.numbers("rotation", required=False)
    c.labels("rectanglelabels")
    c.score()


def _check_keypoint(c: C.Check) -> None:
    c.required_numbers(("x", "y"))
    c.numbers("width", required=False, nonneg=True)
    c.labels("keypointlabels")


def _check_ellipse(c: C.Check) -> None:
    c.required_numbers(("x", "y", "radiusX", "radiusY"), nonneg=("radiusX", "radiusY"))
    c.numbers("rotation", required=False)
    c.labels("ellipselabels")


def _check_polygon(c: C.Check) -> None:
    c.points()
    c.flag("closed")
    c.labels("polygonlabels")


def _check_mask(c: C.Check) -> None:
    for i, v in enumerate(c.vals):  # another format string is a kind we count and skip
        fmt = v.get("format", "rle")
        if fmt.__class__ is not str:
            c.fail(i, f"field 'format' = {C.show(fmt)} is not a string")
    c.ints("rle", [i for i, v in enumerate(c.vals) if v.get("format", "rle") == "rle"])
    c.labels("brushlabels")


def _check_scalar(c: C.Check) -> None:
    for i, (r, v) in enumerate(zip(c.res, c.vals, strict=True)):
        key = "rating" if r.get("type") == "rating" or "rating" in v else "number"
        c._number(i, key, v.get(key, C.MISSING), True, False)


def _check_relation(c: C.Check) -> None:
    c.text_of("from_id")
    c.text_of("to_id")
    c.one_of("direction", RELATION_DIRECTIONS)
    c.strings("labels", required=False)


CHECKS: dict[str, Callable[[C.Check], None]] = {
    "boxes": _check_box, "polygons": _check_polygon, "keypoints": _check_keypoint,
    "ellipses": _check_ellipse, "masks": _check_mask, "choices": lambda c: c.strings("choices"),
    "texts": lambda c: c.strings("text"), "taxonomy": lambda c: c.paths("taxonomy"),
    "scalars": _check_scalar, "relations": _check_relation,
}


def _floats(dicts: Sequence[dict], key: str, default: float = NAN) -> np.ndarray:
    vals = list(map(dict.get, dicts, repeat(key), repeat(default)))
    try:
        return np.asarray(vals, dtype=np.float64).reshape(len(vals))
    except (TypeError, ValueError):
        return np.asarray([_to_float(v) for v in vals], dtype=np.float64)


def _float_cols(dicts: Sequence[dict], keys: tuple[str, ...], defaults: tuple[float, ...]
                ) -> np.ndarray:
    """``(n, len(keys))`` float64 of ``keys`` (>= 2), each as ``_floats`` reads it."""
    if FAST:  # one pass when every key is there and every value converts
        try:
            return np.fromiter(chain.from_iterable(map(itemgetter(*keys), dicts)), np.float64,
                               count=len(dicts) * len(keys)).reshape(len(dicts), len(keys))
        except (KeyError, TypeError, ValueError):
            pass
    return np.stack([_floats(dicts, k, d) for k, d in zip(keys, defaults, strict=True)], 1)


def _to_float(v: Any) -> float:
    try:
        return float(v) if not isinstance(v, bool) else NAN
    except (TypeError, ValueError):
        return NAN


def _check(ctx: Context, arr: np.ndarray, names: Sequence[str], what: str, b: Batch,
           rows_item: np.ndarray | None = None, lo: float = 0.0, hi: float = 100.0
           ) -> np.ndarray:
    """Clip (and count) or reject values of ``arr`` (n, k) outside [lo, hi] or not finite."""
    bad = ~(np.isfinite(arr) & (arr >= lo) & (arr <= hi))
    if not bad.any():
        return arr
    if ctx.clip:
        ctx.clipped += int(bad.sum())
        return np.clip(np.nan_to_num(arr, nan=lo, posinf=hi, neginf=lo), lo, hi)
    for i in np.flatnonzero(bad.any(axis=1)).tolist():
        j = int(np.flatnonzero(bad[i])[0])
        k = int(rows_item[i]) if rows_item is not None else i
        ctx.reject(int(b.sample[k]), f"{what} result {b.rid[k]!r}: {names[j]}="
                   f"{float(arr[i, j]):g} is outside {lo:g}..{hi:g} "
                   "(use out_of_range='clip' to clip)")
    return arr


def _angle(ctx: Context, arr: np.ndarray, what: str, b: Batch) -> np.ndarray:
    """Rotation in degrees: a non-finite value becomes 0 (counted) or rejects the task."""
    bad = ~np.isfinite(arr)
    if not bad.any():
        return arr[:, None]
    if ctx.clip:
        ctx.clipped += int(bad.sum())
        return np.where(bad, 0.0, arr)[:, None]
    for i in np.flatnonzero(bad).tolist():
        ctx.reject(int(b.sample[i]), f"{what} result {b.rid[i]!r}: rotation={float(arr[i]):g} "
                                     "is not finite (use out_of_range='clip' to set it to 0)")
    return arr[:, None]


def _common(group: str, b: Batch, src: np.ndarray | None) -> Rows:
    """Rows of ``group`` for batch rows ``src`` (None: every row once, in order)."""
    rows = Rows(group)
    if src is None:
        rows.sample, rows.slot = b.sample, b.slot
        rows.fixed["annotation"], rows.fixed["source"] = b.ann, b.src
        rows.fixed["control"] = b.control
        rows.text["rid"] = encode_texts(b.rid)
        return rows
    rows.sample, rows.slot = b.sample[src], b.slot[src]
    rows.fixed["annotation"], rows.fixed["source"] = b.ann[src], b.src[src]
    rows.fixed["control"] = b.control[src]
    rid = b.rid
    rows.text["rid"] = encode_texts([rid[i] for i in src.tolist()])
    return rows


def _labels(ctx: Context, b: Batch, key: str) -> tuple[np.ndarray | None, np.ndarray]:
    """Row -> batch row (None: one row each, in order), and label ids (one row per label; -1
    for a result without one)."""
    vals = b.val
    if FAST:
        got: list[Any] = list(map(dict.get, vals, repeat(key)))
        if got and all_of_class(got, list) and list(map(len, got)).count(1) == len(got):
            firsts = list(map(itemgetter(0), got))
            if all_of_class(firsts, str):
                return None, np.asarray(ctx.label_ids(b.control, firsts), np.int32)
    src: list[int] = []
    lab: list[int] = []
    label_id = ctx.label_id
    controls = b.control.tolist()
    single = True
    for i, v in enumerate(vals):
        labs = v.get(key)
        if labs.__class__ is list and len(labs) == 1 and labs[0].__class__ is str:
            lab.append(label_id(controls[i], labs[0]))
            if not single:
                src.append(i)
            continue
        if single:  # switch to explicit row indices
            src = list(range(i))
            single = False
        if labs is None:
            labs = v.get("labels")
        if isinstance(labs, str):
            labs = [labs]
        if not labs or not isinstance(labs, list):
            src.append(i)
            lab.append(-1)
            continue
        for name in labs:
            src.append(i)
            lab.append(label_id(controls[i], str(name)))
    if single:
        return None, np.asarray(lab, np.int32)
    return np.asarray(src, np.int64), np.asarray(lab, np.int32)


def all_of_class(values: list, cls: type) -> bool:
    """Whether every value is exactly of class ``cls`` (True for none)."""
    return not values or set(map(type, values)) == {cls}


def _pick(arr: np.ndarray, src: np.ndarray | None) -> np.ndarray:
    return arr if src is None else arr[src]


def _scores(b: Batch) -> np.ndarray:
    raw = list(map(dict.get, b.res, repeat("score"), b.pscore))
    if raw.count(None) == len(raw):
        return np.full(len(raw), NAN, np.float32)
    return np.asarray([_to_float(x) if x is not None else NAN for x in raw], np.float32)


def boxes(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "boxes")
    xywhr = _float_cols(b.val, ("x", "y", "width", "height", "rotation"), (NAN,) * 4 + (0.0,))
    xywh = _check(ctx, xywhr[:, :4], ("x", "y", "width", "height"), "rectangle", b)
    rot = _angle(ctx, xywhr[:, 4], "rectangle", b)
    src, lab = _labels(ctx, b, "rectanglelabels")
    rows = _common("boxes", b, src)
    rows.fixed["xywhr"] = _pick(np.concatenate([xywh, rot], axis=1), src)
    rows.fixed["label"] = lab
    rows.fixed["score"] = _pick(_scores(b), src)
    return rows


def keypoints(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "keypoints")
    xys = _float_cols(b.val, ("x", "y", "width"), (NAN, NAN, 0.0))
    xys = _check(ctx, xys, ("x", "y", "width"), "keypoint", b)
    src, lab = _labels(ctx, b, "keypointlabels")
    rows = _common("keypoints", b, src)
    xys = _pick(xys, src)
    rows.fixed["xy"] = xys[:, :2]
    rows.fixed["size"] = xys[:, 2]
    rows.fixed["label"] = lab
    return rows


def ellipses(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "ellipses")
    pr = _float_cols(b.val, ("x", "y", "radiusX", "radiusY", "rotation"), (NAN,) * 4 + (0.0,))
    p = _check(ctx, pr[:, :4], ("x", "y", "radiusX", "radiusY"), "ellipse", b)
    rot = _angle(ctx, pr[:, 4], "ellipse", b)
    src, lab = _labels(ctx, b, "ellipselabels")
    rows = _common("ellipses", b, src)
    rows.fixed["params"] = _pick(np.concatenate([p, rot], axis=1), src)
    rows.fixed["label"] = lab
    return rows


def _point(p: Any) -> tuple[float, float]:
    if isinstance(p, (list, tuple)) and len(p) >= 2:
        return _to_float(p[0]), _to_float(p[1])
    return NAN, NAN


def polygons(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "polygons")
    n = len(b)
    plists: list[Any] = list(map(dict.get, b.val, repeat("points")))
    if not (FAST and all_of_class(plists, list)):
        plists = [p if isinstance(p, list) else [] for p in (p or [] for p in plists)]
    lens = np.fromiter(map(len, plists), np.int64, count=n)
    flat = list(chain.from_iterable(plists))
    try:
        pts = np.asarray(flat, np.float64).reshape(len(flat), 2)
    except (TypeError, ValueError):
        pts = np.asarray([_point(p) for p in flat], np.float64).reshape(len(flat), 2)
    owner = np.repeat(np.arange(n), lens)
    pts = _check(ctx, pts, ("x", "y"), "polygon", b, rows_item=owner)
    src, lab = _labels(ctx, b, "polygonlabels")
    rows = _common("polygons", b, src)
    if src is None:
        rows.nested["points"] = (pts, lens)
    else:
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        rows.nested["points"] = (pts[ranges_index(starts[src], lens[src])], lens[src])
    closed = np.fromiter(map(bool, map(dict.get, b.val, repeat("closed"), repeat(True))),
                         np.uint8, count=n)
    rows.fixed["closed"] = _pick(closed, src)
    rows.fixed["label"] = lab
    return rows


def masks(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "masks")
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
            mask = rle_to_mask(val.get("rle") or [], h, w)
        except (RLEError, TypeError, ValueError) as e:
            ctx.reject(int(b.sample[i]), f"brush result {b.rid[i]!r}: {e}")
            continue
        kept.append(i)
        bits.append(np.packbits(mask.ravel()))
        hw.append((h, w))
    b = b.take(kept)
    src, lab = _labels(ctx, b, "brushlabels")
    rows = _common("masks", b, src)
    sel = range(len(b)) if src is None else src.tolist()
    chosen = [bits[i] for i in sel]
    rows.nested["bits"] = (np.concatenate(chosen) if chosen else np.zeros(0, np.uint8),
                           np.fromiter((c.size for c in chosen), np.int64, count=len(chosen)))
    hwa = _pick(np.asarray(hw, np.int32).reshape(len(hw), 2), src)
    rows.fixed["height"], rows.fixed["width"] = hwa[:, 0], hwa[:, 1]
    rows.fixed["label"] = lab
    return rows


def _listed(v: Any) -> list:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


def _strings(lists: list) -> list | None:
    """``lists`` flattened when every entry is a list of strings (fast path), else None."""
    if not (FAST and all_of_class(lists, list)):
        return None
    flat = list(chain.from_iterable(lists))
    return flat if all_of_class(flat, str) else None


def _listed_rows(b: Batch, key: str) -> tuple[np.ndarray, list]:
    """Batch row of every entry of ``value[key]`` (a list, a single value or none), and the
    entries."""
    raw: list[Any] = list(map(dict.get, b.val, repeat(key)))
    flat = _strings(raw)
    if flat is not None:
        lens = np.fromiter(map(len, raw), np.int64, count=len(raw))
        return np.repeat(np.arange(len(raw), dtype=np.int64), lens), flat
    src: list[int] = []
    out: list = []
    for i, v in enumerate(raw):
        for c in _listed(v):
            src.append(i)
            out.append(_text(c))
    return np.asarray(src, np.int64), out


def choices(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "choices")
    src, names = _listed_rows(b, "choices")
    rows = _common("choices", b, src)
    rows.fixed["label"] = np.asarray(ctx.label_ids(rows.fixed["control"], names), np.int32)
    return rows


def texts(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "texts")
    src, out = _listed_rows(b, "text")
    rows = _common("texts", b, src)
    rows.text["text"] = encode_texts(out)
    return rows


def taxonomy(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "taxonomy")
    src: list[int] = []
    out: list[str] = []
    for i, v in enumerate(b.val):
        for path in _listed(v.get("taxonomy")):
            src.append(i)
            out.append(orjson.dumps([_text(p) for p in _listed(path)]).decode())
    rows = _common("taxonomy", b, np.asarray(src, np.int64))
    rows.text["path"] = encode_texts(out)
    return rows


def scalars(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "scalars")
    kinds = [0 if r.get("type") == "rating" or "rating" in v else 1
             for r, v in zip(b.res, b.val, strict=True)]
    vals = [_to_float(v.get("rating" if k == 0 else "number"))
            for v, k in zip(b.val, kinds, strict=True)]
    rows = _common("scalars", b, None)
    rows.fixed["kind"] = np.asarray(kinds, np.uint8)
    rows.fixed["value"] = np.asarray(vals, np.float64)
    return rows


def relations(ctx: Context, b: Batch) -> Rows:
    b = _valid(ctx, b, "relations")
    rows = _common("relations", b, None)
    rel = b.res
    dirs = [RELATION_DIRECTIONS.index(d) if (d := r.get("direction", "right"))
            in RELATION_DIRECTIONS else 0 for r in rel]
    rows.fixed["direction"] = np.asarray(dirs, np.uint8)
    rows.text["from_rid"] = encode_texts([str(r.get("from_id", "")) for r in rel])
    rows.text["to_rid"] = encode_texts([str(r.get("to_id", "")) for r in rel])
    rows.text["labels"] = encode_texts(
        [orjson.dumps([_text(x) for x in _listed(r.get("labels"))]).decode() for r in rel])
    return rows


EXTRACT: dict[str, Callable[[Context, Batch], Rows]] = {
    "boxes": boxes, "polygons": polygons, "keypoints": keypoints, "ellipses": ellipses,
    "masks": masks, "choices": choices, "texts": texts, "taxonomy": taxonomy,
    "scalars": scalars, "relations": relations,
}
