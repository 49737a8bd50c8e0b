"""Malformed result values reject their task (never coerced), on the fast and generic paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from npu_data.annotations import parse_export
from npu_data.annotations import results as R
from npu_data.errors import UserError

HUGE = "__HUGE_NUMBER__"  # written as the JSON number 1e309 (parsed as infinity)


def _res(rid: str, t: str, value: dict, **kw: Any) -> dict:
    return {"id": rid, "from_name": "ctl", "to_name": "image", "type": t,
            "original_width": 5, "original_height": 3, "value": value, **kw}


def _box(rid: str = "ok", **over: Any) -> dict:
    v: dict[str, Any] = {"x": 10, "y": 20.5, "width": 30, "height": 40, "rotation": 0,
                         "rectanglelabels": ["cat"]}
    v.update(over)
    return _res(rid, "rectanglelabels", {k: x for k, x in v.items() if x is not _DROP})


_DROP: Any = object()


def _poly(rid: str = "ok", points: Any = ((1, 2), (3, 4.5), (5, 6))) -> dict:
    v: dict[str, Any] = {"closed": True, "polygonlabels": ["dog"]}
    if points is not _DROP:
        v["points"] = [list(p) for p in points] if isinstance(points, tuple) else points
    return _res(rid, "polygonlabels", v)


def _task(tid: int, results: list) -> dict:
    return {"id": tid, "data": {"image": f"/data/{tid}.jpg"},
            "annotations": [{"id": tid, "result": results}]}


# (bad result, field named in the reason, the value as the reason shows it)
CASES: list[tuple[str, dict, str, str]] = [
    ("string number", _box("bad", x="ten"), "x", "'ten'"),
    ("numeric string", _box("bad", y="12.5"), "y", "'12.5'"),
    ("None", _box("bad", x=None), "x", "None"),
    ("NaN", _box("bad", x=float("nan")), "x", "nan"),
    ("inf", _box("bad", width=float("inf")), "width", "inf"),
    ("-inf", _box("bad", rotation=float("-inf")), "rotation", "-inf"),
    ("huge number", _box("bad", x=HUGE), "x", "inf"),
    ("huge string", _box("bad", x="1e309"), "x", "'1e309'"),
    ("huge int", _box("bad", height=10 ** 400), "height", "1000000"),
    ("bool", _box("bad", x=True), "x", "True"),
    ("list number", _box("bad", x=[1]), "x", "[1]"),
    ("labels as string", _box("bad", rectanglelabels="cat"), "rectanglelabels", "'cat'"),
    ("labels with non-strings", _box("bad", rectanglelabels=["cat", 5]), "rectanglelabels",
     "['cat', 5]"),
    ("labels None", _box("bad", rectanglelabels=None), "rectanglelabels", "None"),
    ("missing y", _box("bad", y=_DROP), "y", "is missing"),
    ("missing width", _box("bad", width=_DROP), "width", "is missing"),
    ("negative width", _box("bad", width=-3), "width", "-3"),
    ("negative height", _box("bad", height=-0.5), "height", "-0.5"),
    ("points flat", _poly("bad", [1, 2, 3, 4]), "points[0]", "1"),
    ("points too deep", _poly("bad", [[[1, 2]]]), "points[0]", "[[1, 2]]"),
    ("point of one", _poly("bad", [[1, 2], [3]]), "points[1]", "[3]"),
    ("point of three", _poly("bad", [[1, 2, 3]]), "points[0]", "[1, 2, 3]"),
    ("point string", _poly("bad", [[1, 2], ["3", 4]]), "points[1]", "['3', 4]"),
    ("point NaN", _poly("bad", [[float("nan"), 2]]), "points[0]", "[nan, 2]"),
    ("points string", _poly("bad", "1,2"), "points", "'1,2'"),
    ("points missing", _poly("bad", _DROP), "points", "is missing"),
    ("keypoint x string", _res("bad", "keypointlabels", {"x": "5", "y": 1,
                                                         "keypointlabels": ["eye"]}), "x", "'5'"),
    ("keypoint width negative", _res("bad", "keypoint", {"x": 5, "y": 1, "width": -1}),
     "width", "-1"),
    ("ellipse radius negative", _res("bad", "ellipselabels", {
        "x": 5, "y": 1, "radiusX": -1, "radiusY": 2, "ellipselabels": ["o"]}), "radiusX", "-1"),
    ("ellipse radius NaN", _res("bad", "ellipse", {
        "x": 5, "y": 1, "radiusX": 1, "radiusY": float("nan")}), "radiusY", "nan"),
    ("ellipse missing radius", _res("bad", "ellipse", {"x": 5, "y": 1, "radiusX": 1}),
     "radiusY", "is missing"),
    ("rle strings", _res("bad", "brushlabels", {"format": "rle", "rle": ["1", 2],
                                                "brushlabels": ["m"]}), "rle", "['1', 2]"),
    ("rle not a list", _res("bad", "brush", {"format": "rle", "rle": "abc"}), "rle", "'abc'"),
    ("rle floats", _res("bad", "brush", {"rle": [1.5, 2]}), "rle", "[1.5, 2]"),
    ("choices string", _res("bad", "choices", {"choices": "solo"}), "choices", "'solo'"),
    ("choices numbers", _res("bad", "choices", {"choices": [1]}), "choices", "[1]"),
    ("text None", _res("bad", "textarea", {"text": None}), "text", "None"),
    ("taxonomy flat", _res("bad", "taxonomy", {"taxonomy": ["a"]}), "taxonomy", "['a']"),
    ("rating string", _res("bad", "rating", {"rating": "5"}), "rating", "'5'"),
    ("number inf", _res("bad", "number", {"number": float("inf")}), "number", "inf"),
    ("score string", _box("bad") | {"score": "0.5"}, "score", "'0.5'"),
    ("score huge int", _box("bad") | {"score": 10 ** 400}, "score", "1000000"),
    ("score NaN", _box("bad") | {"score": float("nan")}, "score", "nan"),
    ("closed string", _res("bad", "polygon", {"points": [[1, 2]], "closed": "no"}), "closed",
     "'no'"),
]


def _export(tmp_path: Path, bad: dict | None) -> Path:
    unknown = {"id": "u", "type": "videorectangle", "from_name": "v", "value": {"sequence": []}}
    tasks = [_task(1, [_box("b1"), _poly("p1"), unknown]),
             _task(2, [_box("ok2"), _poly("p2")] + ([bad] if bad is not None else [])),
             _task(3, [_box("b3", x=55.5), _poly("p3", ((10, 20), (30, 40)))])]
    if bad is None:
        del tasks[1]
    p = tmp_path / ("bad.json" if bad is not None else "good.json")
    p.write_text(json.dumps(tasks).replace(f'"{HUGE}"', "1e309"))
    return p


@pytest.fixture(params=[True, False], ids=["fast", "generic"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(R, "FAST", request.param)
    return bool(request.param)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_value_rejects_the_task(tmp_path: Path, fast: bool,
                                          case: tuple[str, dict, str, str]) -> None:
    _, bad, field, shown = case
    for out_of_range in ("clip", "reject"):
        r = parse_export(_export(tmp_path, bad), out_of_range=out_of_range)
        assert [(x.index, x.task_id) for x in r.rejected] == [(1, 2)]
        reason = r.rejected[0].reason
        assert reason.startswith(f"task 2: result 'bad' ({bad['type']}): field {field!r} ")
        assert shown in reason and reason.endswith("— fix the export")
        good = parse_export(_export(tmp_path, None), out_of_range=out_of_range)
        assert r.table.columns["task_id"].tolist() == [1, 3]
        assert set(r.table.columns) == set(good.table.columns)
        for name, col in good.table.columns.items():
            np.testing.assert_array_equal(r.table.columns[name], col, err_msg=name)
        assert r.stats.unknown_types == {"videorectangle": 1}


def test_fast_and_generic_reject_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bad case in one export, several per task: the same first reason either way."""
    tasks = [_task(10 + i // 2, [_box(f"g{i}"), {**c[1], "id": f"bad{i}"}])
             for i, c in enumerate(CASES)]
    tasks.append(_task(99, [_box("fine"), _poly("fine2")]))
    p = tmp_path / "all.json"
    p.write_text(json.dumps(tasks).replace(f'"{HUGE}"', "1e309"))
    got = []
    for flag in (True, False):
        monkeypatch.setattr(R, "FAST", flag)
        r = parse_export(p)
        got.append(([(x.index, x.task_id, x.reason) for x in r.rejected],
                    r.table.columns["task_id"].tolist()))
    assert got[0] == got[1]
    assert got[0][1] == [99] and len(got[0][0]) == len(tasks) - 1


def test_valid_shapes_are_kept(tmp_path: Path, fast: bool) -> None:
    """Ints and floats, no rotation, unlabeled regions, generic ``labels``, score None."""
    results = [_box("a", rotation=_DROP), _box("b", rectanglelabels=[]),
               _res("c", "rectangle", {"x": 1, "y": 2, "width": 0, "height": 3}),
               _res("d", "labels", {"x": 1, "y": 2, "width": 3, "height": 4,
                                    "labels": ["cat"]}),
               _box("e") | {"score": None}, _box("f") | {"score": 0.5},
               _res("k", "keypoint", {"x": 1, "y": 2}),
               _res("p", "polygon", {"points": []})]
    p = tmp_path / "ok.json"
    p.write_text(json.dumps([_task(1, results)]))
    r = parse_export(p)
    assert r.rejected == [] and r.table.count("boxes") == 6
    assert r.table.columns["boxes.score"][5] == 0.5


def test_strict_stops_at_the_first_malformed_task(tmp_path: Path) -> None:
    from npu_data.shards.writer import WriteOptions, write_dataset
    tasks = [_task(1, [_box("a")]), _task(2, [_box("bad", x="ten")]),
             _task(3, [_box("bad3", rectanglelabels="cat")])]
    p = tmp_path / "e.json"
    p.write_text(json.dumps(tasks))
    with pytest.raises(UserError, match=r"task 2 \(#1\): task 2: result 'bad' "
                                        r"\(rectanglelabels\): field 'x' = 'ten' is not a "
                                        "finite number — fix the export"):
        write_dataset(p, tmp_path / "out", WriteOptions(strict=True))
    assert not (tmp_path / "out").exists()
