"""Sort one chunk's results into per-kind Batches with C-level passes over all of them.

The parser hands over every result list it chose (one per annotation or prediction) with that
list's sample, slot, annotation id, source and prediction score. Types, values, control names
and region ids are read with ``map`` over the whole chunk; only odd results (relations,
untyped or generic ``labels`` results, unknown types, non-objects) take a Python step each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import chain, compress, repeat
from typing import Any

import numpy as np

from npu_data.annotations.results import KINDS, Batch, all_of_class, infer_type
from npu_data.kinds.registry import BY_NAME
from npu_data.kinds.registry import KINDS as REGISTRY

KIND_ORDER = [k.name for k in REGISTRY]  # extraction order (rejection reasons depend on it)
KIND_INDEX = {k: i for i, k in enumerate(KIND_ORDER)}
TOP_LEVEL = {t for k in REGISTRY if k.top_level for t in k.result_types}  # no value/from_name
TYPED = {t: KIND_INDEX[k] for t, k in KINDS.items() if t not in TOP_LEVEL}  # under "value"
NOT_AN_OBJECT = "<not an object>"


def resolve(r: Any) -> tuple[str, str, dict] | str:
    """``(type, kind, value)`` of a relation, untyped or generic ``labels`` result, or the name
    it counts under in the unknown types."""
    if r.__class__ is not dict:
        return NOT_AN_OBJECT
    t = r.get("type")
    val = r if t.__class__ is str and t in TOP_LEVEL else r.get("value")
    if val.__class__ is not dict:
        val = {}
    if t.__class__ is not str or t not in KINDS:
        inferred = infer_type(val) if t in (None, "labels") else None
        if inferred is None or (t == "labels" and "start" in val):
            return str(t)
        t = inferred
    return t, KINDS[t], val


def value_of(r: dict) -> dict | None:
    """The value dict a result counts with (None: the result is skipped)."""
    t = r.get("type")
    if t.__class__ is str and t in TYPED:
        val = r.get("value")
        return val if val.__class__ is dict else {}
    got = resolve(r)
    return None if isinstance(got, str) else got[2]


class Calls:
    """The result lists of one chunk and, per list, where its rows go: ``(sample, slot,
    annotation id, source, prediction score)``."""

    def __init__(self) -> None:
        self.results: list[list] = []
        self.meta: list[tuple[int, int, int, int, Any]] = []


def group(calls: Calls, control_of: Callable[[str], int], counts: dict[str, int],
          unknown: dict[str, int],
          reject: Callable[[int, Any, str, str, Any], None] | None = None) -> dict[str, Batch]:
    """Per-kind batches (in ``KIND_ORDER``) of every result in ``calls``; counts result types
    into ``counts`` and skipped results into ``unknown``. A result whose ``type``,
    ``from_name`` (required but for relations) or ``id`` has the wrong kind of value is
    malformed: ``reject(sample, result id, kind, field, value)`` is told, and the result is
    skipped."""
    flat = list(chain.from_iterable(calls.results))
    if not flat:
        return {}
    try:
        types: list[Any] = list(map(dict.get, flat, repeat("type")))
    except TypeError:  # a result that is not an object
        types = [r.get("type") if r.__class__ is dict else None for r in flat]
    if reject is not None:
        types = _malformed(flat, types, calls, reject)
    try:
        kinds = np.fromiter(map(TYPED.get, types, repeat(-1)), np.int64, count=len(types))
    except TypeError:  # an unhashable type
        kinds = np.asarray([TYPED.get(t, -1) if t.__class__ is str else -1 for t in types],
                           np.int64)
    odd = np.flatnonzero(kinds < 0).tolist()
    for i in odd:
        got = resolve(flat[i])
        if isinstance(got, str):
            unknown[got] = unknown.get(got, 0) + 1
            continue
        types[i] = got[0]
        kinds[i] = KIND_INDEX[got[1]]
    counted = types if not odd else list(compress(types, (kinds >= 0).tolist()))
    for t, c in Counter(counted).items():
        counts[t] = counts.get(t, 0) + c
    call_of = np.repeat(np.arange(len(calls.results)), list(map(len, calls.results)))
    c_sample, c_slot, c_ann, c_src, c_pscore = zip(*calls.meta, strict=True)
    cols: list[np.ndarray] = [np.asarray(c, np.int64)[call_of] for c in (c_sample, c_slot, c_ann)]
    cols.append(np.asarray(c_src, np.uint8)[call_of])
    per_kind = np.bincount(kinds + 1, minlength=len(KIND_ORDER) + 1)
    order = np.argsort(kinds, kind="stable") if per_kind.max() < len(flat) else None
    ends = np.cumsum(per_kind)
    out: dict[str, Batch] = {}
    for k, kind in enumerate(KIND_ORDER):
        if not per_kind[k + 1]:
            continue
        idx = None if order is None else order[ends[k]:ends[k + 1]]
        out[kind] = _batch(kind, flat, idx, cols, call_of, c_pscore, control_of)
    return out


_MALFORMED = object()  # the type of a result that was rejected


def _malformed(flat: list, types: list[Any], calls: Calls,
               reject: Callable[[int, Any, str, str, Any], None]) -> list[Any]:
    """``types`` with the malformed results' replaced by a value no kind has (see group)."""
    names = [r.get("from_name") if r.__class__ is dict else "" for r in flat]
    ids = [r.get("id") if r.__class__ is dict else None for r in flat]
    if (all_of_class(types, str) and (all_of_class(names, str) or all(
            n.__class__ is str or t in TOP_LEVEL for n, t in zip(names, types, strict=True)))
            and all(i is None or i.__class__ in (str, int) for i in ids)):
        return types
    sample_of = np.repeat([m[0] for m in calls.meta], list(map(len, calls.results))).tolist()
    out = list(types)
    for i, r in enumerate(flat):
        if r.__class__ is not dict:
            continue
        bad = None
        t = types[i]
        if t is not None and t.__class__ is not str:
            bad = ("type", t)
        elif t not in TOP_LEVEL and names[i].__class__ is not str:
            bad = ("from_name", names[i])
        elif ids[i] is not None and ids[i].__class__ not in (str, int):
            bad = ("id", ids[i])
        if bad is not None:
            rid = ids[i] if ids[i].__class__ in (str, int) else None
            reject(sample_of[i], rid, str(t) if t.__class__ is str else "result", *bad)
            out[i] = _MALFORMED
    return out


def _batch(kind: str, flat: list, idx: np.ndarray | None, cols: list[np.ndarray],
           call_of: np.ndarray, pscores: tuple[Any, ...], control_of: Callable[[str], int]
           ) -> Batch:
    if idx is None:
        res = flat
        sample, slot, ann, src = cols
    else:
        res = list(map(flat.__getitem__, idx.tolist()))
        sample, slot, ann, src = (c[idx] for c in cols)
        call_of = call_of[idx]
    n = len(res)
    control: np.ndarray
    if BY_NAME[kind].top_level:
        val = res
        control = np.full(n, -1, np.int16)
    else:
        val = list(map(dict.get, res, repeat("value")))
        if not all_of_class(val, dict):
            val = [v if v.__class__ is dict else {} for v in val]
        names = list(map(dict.get, res, repeat("from_name"), repeat("")))
        try:
            uniq = set(names)
        except TypeError:  # an unhashable name
            uniq = {0}
        if not all(u.__class__ is str for u in uniq):
            names = [f if f.__class__ is str else str(f) for f in names]
            uniq = set(names)
        if len(uniq) == 1:
            control = np.full(n, control_of(uniq.pop()), np.int16)
        else:
            ids = {f: control_of(f) for f in uniq}
            control = np.fromiter(map(ids.__getitem__, names), np.int16, count=n)
    rid: list[Any] = list(map(dict.get, res, repeat("id")))
    if not all_of_class(rid, str):
        rid = [x if x.__class__ is str else ("" if x is None else str(x)) for x in rid]
    if pscores.count(None) == len(pscores):  # no prediction scores in the chunk
        pscore: list[Any] = [None] * n
    else:
        pscore = list(map(pscores.__getitem__, call_of.tolist()))
    return Batch(sample, slot, ann, src, control, rid, res, val, pscore)
