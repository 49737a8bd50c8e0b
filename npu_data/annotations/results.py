"""The toolkit of result extraction: one chunk's results of a kind, in, rows of it, out.

Each kind's results arrive as a ``Batch`` (columns in export order); the kind's own
``Kind.check`` and ``Kind.extract`` (``npu_data/kinds/<name>.py``) read them with the helpers
here: the parser hands this module to ``extract`` as ``R``, which satisfies
``kinds.protocols.Extraction`` (mypy checks it there), so the helpers take the Protocols'
types (``ResultBatch``, ``ExtractionContext``, ``CheckedKind``) that ``Batch`` and
``Context`` satisfy. Values are read with C-level ``map`` passes; the
per-result Python loops remain as the generic path, taken when a column holds anything but the
common shapes (or when ``FAST`` is off, to test one against the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from npu_data.annotations import checks as C
from npu_data.annotations.brush_rle import RLEError as RLEError  # re-exported: kinds read R.*
from npu_data.annotations.brush_rle import rle_to_mask as rle_to_mask
from npu_data.annotations.builders import Rows
from npu_data.common.ragged import encode_texts
from npu_data.errors import render
from npu_data.kinds.protocols import CheckedKind, ExtractionContext, ResultBatch
from npu_data.kinds.registry import OF_TYPE

KINDS: dict[str, str] = {t: k.name for t, k in OF_TYPE.items()}  # result type -> kind name
NAN = float("nan")
_CLIPPING = ("reject_out_of_range",)  # the option that clips instead of rejecting (reasons)
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


def valid_rows(ctx: ExtractionContext, b: ResultBatch, kind: CheckedKind) -> ResultBatch:
    """``b`` less the results whose values fail the checks of ``kind`` (their tasks are
    rejected, with the task id, result id, type, field and value in the reason)."""
    def fail(i: int, msg: str) -> None:
        s = int(b.sample[i])
        t = b.res[i].get("type") or kind.result_types[0]
        ctx.reject(s, f"task {ctx.task_of(s)}: result {b.rid[i]!r} ({t}): {msg} "
                      "— fix the export")
    chk = C.Check(b.val, b.res, b.pscore, FAST, fail)
    kind.check(chk)
    if not chk.bad:
        return b
    return b.take([i for i in range(len(b)) if i not in chk.bad])


def _floats(dicts: Sequence[dict], key: str, default: float = NAN) -> np.ndarray:
    vals = list(map(dict.get, dicts, repeat(key), repeat(default)))
    try:
        return np.asarray(vals, dtype=np.float64).reshape(len(vals))
    except (TypeError, ValueError):
        return np.asarray([to_float(v) for v in vals], dtype=np.float64)


def float_cols(dicts: Sequence[dict], keys: tuple[str, ...], defaults: tuple[float, ...]
                ) -> np.ndarray:
    """``(n, len(keys))`` float64 of ``keys`` (>= 2), each as ``_floats`` reads it."""
    if FAST:  # one pass when every key is there and every value converts
        try:
            return np.fromiter(chain.from_iterable(map(itemgetter(*keys), dicts)), np.float64,
                               count=len(dicts) * len(keys)).reshape(len(dicts), len(keys))
        except (KeyError, TypeError, ValueError):
            pass
    return np.stack([_floats(dicts, k, d) for k, d in zip(keys, defaults, strict=True)], 1)


def to_float(v: Any) -> float:
    try:
        return float(v) if not isinstance(v, bool) else NAN
    except (TypeError, ValueError):
        return NAN


def in_range(ctx: ExtractionContext, arr: np.ndarray, names: Sequence[str], what: str,
             b: ResultBatch, rows_item: np.ndarray | None = None, lo: float = 0.0,
             hi: float = 100.0) -> np.ndarray:
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
        ctx.reject(int(b.sample[k]), render(f"{what} result {b.rid[k]!r}: {names[j]}="
                                            f"{float(arr[i, j]):g} is outside {lo:g}..{hi:g} "
                                            "(clipped with {reject_out_of_range=False})",
                                            _CLIPPING))
    return arr


def angle(ctx: ExtractionContext, arr: np.ndarray, what: str, b: ResultBatch) -> np.ndarray:
    """Rotation in degrees: a non-finite value becomes 0 (counted) or rejects the task."""
    bad = ~np.isfinite(arr)
    if not bad.any():
        return arr[:, None]
    if ctx.clip:
        ctx.clipped += int(bad.sum())
        return np.where(bad, 0.0, arr)[:, None]
    for i in np.flatnonzero(bad).tolist():
        ctx.reject(int(b.sample[i]), render(f"{what} result {b.rid[i]!r}: rotation="
                                            f"{float(arr[i]):g} is not finite (0 with "
                                            "{reject_out_of_range=False})", _CLIPPING))
    return arr[:, None]


def common(group: str, b: ResultBatch, src: np.ndarray | None) -> Rows:
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


def labels(ctx: ExtractionContext, b: ResultBatch,
           key: str) -> tuple[np.ndarray | None, np.ndarray]:
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


def pick(arr: np.ndarray, src: np.ndarray | None) -> np.ndarray:
    return arr if src is None else arr[src]


def scores(b: ResultBatch) -> np.ndarray:
    raw = list(map(dict.get, b.res, repeat("score"), b.pscore))
    if raw.count(None) == len(raw):
        return np.full(len(raw), NAN, np.float32)
    return np.asarray([to_float(x) if x is not None else NAN for x in raw], np.float32)


def point(p: Any) -> tuple[float, float]:
    if isinstance(p, (list, tuple)) and len(p) >= 2:
        return to_float(p[0]), to_float(p[1])
    return NAN, NAN


def listed(v: Any) -> list:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def as_text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


def _strings(lists: list) -> list | None:
    """``lists`` flattened when every entry is a list of strings (fast path), else None."""
    if not (FAST and all_of_class(lists, list)):
        return None
    flat = list(chain.from_iterable(lists))
    return flat if all_of_class(flat, str) else None


def listed_rows(b: ResultBatch, key: str) -> tuple[np.ndarray, list]:
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
        for c in listed(v):
            src.append(i)
            out.append(as_text(c))
    return np.asarray(src, np.int64), out


