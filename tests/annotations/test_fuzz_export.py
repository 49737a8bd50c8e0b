"""Fuzzing the importer: one malformed value at a time in a real export.

Every leaf and container of every result of the real Label Studio sample export is replaced,
one at a time, by values of the wrong kind (strings, nulls, NaN/inf, huge numbers, wrong
nesting) or deleted. Whatever the mutation, the parser never crashes (a whole-file problem is
a one-line ``UserError``), and the mutated task is either rejected with a record naming it,
or imported exactly as before — a mutation of a field the importer ignores. Never is a task
imported with annotations that differ from its source without a rejection.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from npu_data.annotations import parse_export
from npu_data.annotations.parse import ParseResult
from npu_data.errors import UserError
from npu_data.kinds.registry import KINDS

SAMPLE = Path(__file__).parent / "data" / "labelstudio-export-sample.json"
BAD: list[Any] = ["ten", None, math.nan, math.inf, -math.inf, 1e308, -1e308, [], {}, True,
                  [[1, 2]], {"x": 1}, -1, 10**30]
GONE = object()  # the key deleted


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths to every value inside ``obj`` (containers and leaves)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, k)
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):  # the first few items of long lists (RLE, points)
            yield (*path, i)
            yield from _leaves(v, (*path, i))


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    if value is GONE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def _kind(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, (int, float)):  # a huge finite number is a value, not a malformed one
        return "number" if math.isfinite(v) else "non-finite number"
    return type(v).__name__


# What the importer accepts by design (docs/architecture.md): a result without an id (its
# region id is ""; an integer id is kept as its digits), a region without labels (imported unlabelled), a relation without labels,
# a result without a type (inferred from its value, else counted as an unknown type), the
# optional fields absent (rotation 0, keypoint width 0).
OPTIONAL = {"rotation", "width", "labels"}


def _allowed(path: tuple[Any, ...], bad: Any, result: dict[str, Any]) -> bool:
    key = path[-1]
    if bad is GONE and key in OPTIONAL and not (key == "width" and result.get("type") in (
            "rectanglelabels", "rectangle")):
        return True
    if key == "id" and (bad is GONE or bad is None or (isinstance(bad, int)
                                                       and not isinstance(bad, bool))):
        return True  # no id, or a number written as its digits
    if bad is GONE and isinstance(key, str) and key.endswith("labels") and len(path) >= 2:
        return True
    return key == "type" and (bad is GONE or bad is None)


def _task_rows(res: ParseResult, task_id: int) -> str:
    """Everything the table holds for task ``task_id`` (as JSON text: NaN compares equal)."""
    t = res.table
    hits = np.flatnonzero(t.columns["task_id"] == task_id).tolist()
    out: dict[str, Any] = {}
    for s in hits:
        out[f"{s}.size"] = (int(t.columns["width"][s]), int(t.columns["height"][s]))
        for kind in KINDS:
            group = kind.name
            rows = t.rows(group, s)
            for name in kind.fixed:
                out[f"{s}.{group}.{name}"] = np.asarray(
                    t.columns[f"{group}.{name}"][rows]).tolist()
            for name in kind.text:
                out[f"{s}.{group}.{name}"] = t.texts(f"{group}.{name}", rows)
            for nest in kind.nested:
                off = t.columns[f"{group}.{nest.offsets}"]
                a, b = int(off[rows.start]), int(off[rows.stop])
                out[f"{s}.{group}.{nest.values}"] = np.asarray(
                    t.columns[f"{group}.{nest.values}"][a:b]).tolist()
    return json.dumps(out, sort_keys=True)


def _parse(tmp_path: Path, tasks: list[dict[str, Any]]) -> ParseResult | None:
    p = tmp_path / "export.json"
    p.write_text(json.dumps(tasks), encoding="utf-8")  # NaN / Infinity as JSON extensions
    try:
        return parse_export(p)
    except UserError as err:  # a whole-file problem: one line, naming the file
        assert "\n" not in str(err) and "export.json" in str(err), str(err)
        return None


def _mutations(tasks: list[dict[str, Any]]) -> Iterator[tuple[int, str, tuple[Any, ...], Any]]:
    for ti, task in enumerate(tasks):
        for ai, ann in enumerate(task.get("annotations") or []):
            for ri, result in enumerate(ann.get("result") or []):
                for path in _leaves(result):
                    for bad in [*BAD, GONE]:
                        yield ti, str(result.get("id")), (ti, "annotations", ai, "result", ri,
                                                          *path), bad


@pytest.mark.slow
def test_no_mutation_slips_through(tmp_path: Path) -> None:
    tasks = json.loads(SAMPLE.read_text(encoding="utf-8"))
    base = parse_export(SAMPLE)
    assert base.rejected == []
    before = {t["id"]: _task_rows(base, t["id"]) for t in tasks}
    tried = rejected = unchanged = whole_file = 0
    for ti, rid, path, bad in _mutations(tasks):
        mutated = copy.deepcopy(tasks)
        try:
            original = _get(mutated, path)
        except (KeyError, IndexError, TypeError):
            continue
        if bad is not GONE and _kind(bad) == _kind(original):
            continue  # a value of the same kind is an edit, not a malformed export
        if bad is GONE and isinstance(path[-1], int):
            continue  # one point / one text fewer: an edit too
        result = tasks[ti]["annotations"][path[2]]["result"][path[4]]
        if _allowed(path[5:], bad, result):
            continue
        _set(mutated, path, bad)
        tried += 1
        res = _parse(tmp_path, mutated)
        if res is None:
            whole_file += 1
            continue
        task_id = tasks[ti]["id"]
        why = [r.reason for r in res.rejected if r.task_id == task_id]
        if why:
            rejected += 1
            continue
        after = _task_rows(res, task_id)
        assert after == before[task_id], (
            f"{path} = {bad!r} changed task {task_id} (result {rid}) without a rejection")
        unchanged += 1
        others = [r for r in res.rejected if r.task_id != task_id]
        assert not others, others
    assert tried > 1000 and rejected > tried // 3, (tried, rejected, unchanged, whole_file)


@pytest.mark.parametrize("bad", ["ten", None, math.nan, [], {"x": 1}])
def test_a_bad_coordinate_names_task_result_field_and_value(tmp_path: Path, bad: Any) -> None:
    tasks = json.loads(SAMPLE.read_text(encoding="utf-8"))
    result = next(r for r in tasks[0]["annotations"][0]["result"]
                  if r["type"] == "rectanglelabels")
    result["value"]["x"] = bad
    res = _parse(tmp_path, tasks)
    if res is None:  # NaN is not JSON: the file is refused with one line
        assert isinstance(bad, float)
        return
    (rej,) = [r for r in res.rejected if r.task_id == tasks[0]["id"]]
    assert f"task {tasks[0]['id']}" in rej.reason and repr(result["id"]) in rej.reason
    assert "'x'" in rej.reason or " x " in rej.reason or "x=" in rej.reason, rej.reason
