"""The column-wise fast extraction gives the same table as the per-item generic extraction.

``mixed_export`` builds a large export with every result type and the odd values Label Studio
(or a hand-edited file) can hold; each test parses it twice — fast paths on and off — and
compares every column, the rejections and the statistics.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from label_studio_sdk.converter.brush import encode_rle

from npu_data.annotations import parse as parse_mod
from npu_data.annotations import parse_export
from npu_data.annotations import results as R

LABELS = ["cat", "dog", "car", "é€", 'q"\\,]}']
ODD_NUMBERS: list[Any] = [None, "12.5", True, "abc", [1, 2], {"a": 1}, float("nan"),
                          float("inf"), -3, 150, 7]


def _num(rng: random.Random, odd: float) -> Any:
    if rng.random() < odd:
        return rng.choice(ODD_NUMBERS)
    return rng.choice([rng.randint(0, 90), round(rng.uniform(0, 90), 6)])


def _labels(rng: random.Random, odd: float) -> Any:
    r = rng.random()
    if r > odd:
        return [rng.choice(LABELS)]
    return rng.choice([[], ["cat", "dog"], "dog", [3], None, ["cat", 5, "car"], [["x"]],
                       "d"])


def _value(rng: random.Random, t: str, odd: float) -> dict:
    """A value dict for result type ``t`` (labels key only for the *labels types)."""
    base = t.removesuffix("labels") if t.endswith("labels") else t
    v: dict[str, Any]
    if base == "rectangle":
        v = {k: _num(rng, odd) for k in ("x", "y", "width", "height")}
        if rng.random() > odd:
            v["rotation"] = rng.choice([0, 0, 15.5, _num(rng, odd)])
    elif base == "polygon":
        n = rng.randint(0, 5)
        pts: Any = [[_num(rng, odd / 3), _num(rng, odd / 3)] for _ in range(n)]
        if rng.random() < odd:
            pts = rng.choice([None, "pts", [[1, 2, 3]], [[1]], [5], [[1, 2], "x"], []])
        v = {"points": pts}
        if rng.random() > odd:
            v["closed"] = rng.choice([True, False])
        elif rng.random() < odd:
            v["closed"] = rng.choice([None, "no"])
    elif base == "keypoint":
        v = {"x": _num(rng, odd), "y": _num(rng, odd)}
        if rng.random() > odd:
            v["width"] = _num(rng, odd)
    elif base == "ellipse":
        v = {k: _num(rng, odd) for k in ("x", "y", "radiusX", "radiusY")}
        if rng.random() > odd:
            v["rotation"] = _num(rng, odd)
    elif base == "brush":
        h, w = 3, 5
        mask = np.zeros((h, w, 4), np.uint8)
        mask[rng.randint(0, h - 1), :, 3] = 255
        v = {"format": "rle", "rle": encode_rle(mask.ravel().tolist())}
        if rng.random() < odd:
            v = rng.choice([{"format": "png"}, {"rle": [1, 2, 3]}, {"rle": None}])
    elif t == "choices":
        v = {"choices": rng.choice([[rng.choice(LABELS)], ["cat", "dog"], []])}
        if rng.random() < odd:
            v = {"choices": rng.choice(["solo", None, [1, ["x"]], [{"k": "é"}]])}
    elif t == "textarea":
        v = {"text": rng.choice([[f"text {rng.random()}"], ["é€ 😀", "two"], []])}
        if rng.random() < odd:
            v = {"text": rng.choice(["plain", None, [1, {"a": [1]}], [None]])}
    elif t == "taxonomy":
        v = {"taxonomy": rng.choice([[["a", "b"]], [["a"], ["c", "d"]]])}
        if rng.random() < odd:
            v = {"taxonomy": rng.choice(["x", None, [[1, "z"]]])}
    elif t in ("rating", "number"):
        v = {t: _num(rng, odd)}
    else:
        v = {}
    if t.endswith("labels") and t != "labels":
        v[t] = _labels(rng, odd)
    return v


TYPES = ["rectanglelabels", "rectangle", "polygonlabels", "polygon", "keypointlabels",
         "keypoint", "ellipselabels", "ellipse", "brushlabels", "brush", "choices",
         "textarea", "taxonomy", "rating", "number"]


def _result(rng: random.Random, k: int, odd: float) -> Any:
    r = rng.random()
    if r < odd / 4:
        return rng.choice([None, 5, "str", ["list"]])
    rid: Any = rng.choice([f"r{k}", f"r{k}", f"é{k}", k, None]) if rng.random() < odd else f"r{k}"
    if r < odd / 2:  # relation, untyped / generic / unknown results
        kind = rng.choice(["relation", "none", "labels", "labels-start", "video", "list-type"])
        if kind == "relation":
            return {"type": "relation", "from_id": f"r{k - 1}", "to_id": f"r{k + 1}",
                    "direction": rng.choice(["right", "left", "bi", "up"]),
                    "labels": rng.choice([["near"], [], None, "x"])}
        if kind == "list-type":
            return {"id": rid, "type": ["rectanglelabels"], "value": {"x": 1}}
        t = rng.choice(TYPES)
        val = _value(rng, t, odd)
        if kind == "labels-start":
            val = {"start": 1, "end": 3, "labels": ["x"]}
        elif kind == "labels":
            val["labels"] = val.pop(t, ["cat"]) if t.endswith("labels") else ["cat"]
        return {"id": rid, "from_name": "gen", "type": {"none": None, "labels": "labels", "labels-start": "labels",
                                                        "video": "videorectangle"}[kind],
                "value": val, "original_width": 64, "original_height": 48}
    t = rng.choice(TYPES)
    res: dict[str, Any] = {"id": rid, "from_name": rng.choice(["c1", "c2", t]),
                           "to_name": "image", "type": t, "value": _value(rng, t, odd)}
    if rng.random() < odd:
        res["from_name"] = rng.choice([None, 7, "é"])
    if rng.random() < odd:
        res["value"] = rng.choice([None, [], "v"])
    if t.startswith("brush") and rng.random() > odd:
        res.update(original_width=5, original_height=3)
    elif rng.random() > odd:
        res.update(original_width=rng.choice([640, 1280]), original_height=480)
    elif rng.random() < 0.5:
        res.update(original_width=rng.choice([0, -1, "640", True, None]), original_height=480)
    if rng.random() < odd:
        res["score"] = rng.choice([0.25, None, "0.5", True, "x"])
    return res


def _annotation(rng: random.Random, aid: int, odd: float, key: str = "result") -> dict:
    res: Any = [_result(rng, aid * 100 + j, odd) for j in range(rng.randint(0, 8))]
    if rng.random() < odd / 4:
        res = rng.choice([None, [], {"x": 1}])
    day = rng.randint(1, 9)
    return {"id": aid if rng.random() > odd / 4 else "a", key: res,
            "was_cancelled": rng.random() < odd / 2, "ground_truth": rng.random() < 0.2,
            "created_at": f"2026-01-0{day}T00:00:00Z",
            "updated_at": rng.choice([f"2026-01-0{day}T00:00:00Z", None])}


def mixed_export(n: int, seed: int = 0, odd: float = 0.15, flavour: str = "json") -> list:
    """``n`` tasks of ``flavour`` (json, completions, json-min) with every result type."""
    rng = random.Random(seed)
    if flavour == "json-min":
        return [_min_row(rng, i, odd) for i in range(n)]
    key = "completions" if flavour == "completions" else "annotations"
    tasks: list[Any] = []
    for i in range(n):
        if rng.random() < odd / 8:
            tasks.append(rng.choice([5, "task", {"id": i, "data": {"text": "no image"}},
                                     {"id": i, "data": "x"}]))
            continue
        anns = [_annotation(rng, i * 10 + a, odd) for a in range(rng.randint(0, 3))]
        preds: Any = [{"id": i * 10 + 5 + p, "score": rng.choice([0.9, None, "0.3"]),
                       "result": [_result(rng, i * 100 + 50 + j, odd)
                                  for j in range(rng.randint(0, 4))]}
                      for p in range(rng.randint(0, 2))]
        if rng.random() < odd / 2:
            preds = [1, 2]
        task: dict[str, Any] = {"id": i + 1 if rng.random() > odd / 4 else f"t{i}",
                                key: anns, "predictions": preds,
                                "data": {"image": f"/data/upload/1/{i}.jpg", "n": i}}
        tasks.append(task)
    return tasks


def _min_row(rng: random.Random, i: int, odd: float) -> dict:
    tid = rng.randint(0, max(1, i // 2))  # rows of a task, apart
    row: dict[str, Any] = {"image": f"/data/{tid}.png", "id": tid,
                           "annotation_id": rng.choice([i, i, None]),
                           "updated_at": f"2026-01-{rng.randint(10, 28)}"}
    if rng.random() < 0.7:
        row["bbox"] = [{**_value(rng, "rectanglelabels", odd), "original_width": 64,
                        "original_height": 32} for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        row["poly"] = {**_value(rng, "polygonlabels", odd)}
    if rng.random() < 0.5:
        row["caption"] = rng.choice([["hello"], ["a", "b"], "single"])
    if rng.random() < 0.5:
        row["cls"] = rng.choice(["indoor", "outdoor"])
    return row


def _parse_both(path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple:
    fast = parse_export(path, **kw)
    with monkeypatch.context() as m:
        m.setattr(R, "FAST", False)
        slow = parse_export(path, **kw)
    return fast, slow


def _assert_same(fast: Any, slow: Any) -> None:
    a, b = fast.table, slow.table
    assert a.num_samples == b.num_samples
    assert a.controls == b.controls and a.labels == b.labels
    assert sorted(a.columns) == sorted(b.columns)
    for k, v in a.columns.items():
        w = b.columns[k]
        assert v.dtype == w.dtype and v.shape == w.shape, k
        assert v.tobytes() == w.tobytes(), k
    assert fast.rejected == slow.rejected
    assert fast.stats == slow.stats


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["json", "completions", "json-min"])
@pytest.mark.parametrize("writer", ["json", "orjson"])
def test_fast_equals_generic_every_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        flavour: str, writer: str) -> None:
    tasks = mixed_export(600, seed=1, flavour=flavour)
    path = tmp_path / "mixed.json"
    # Python's json writes NaN/Infinity literals (orjson refuses them: the exact split and
    # json take those chunks); orjson writes them as null (the guessed split takes them).
    path.write_bytes(json.dumps(tasks).encode() if writer == "json" else orjson.dumps(tasks))
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 20000)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 20000)  # many chunks
    guessed = []
    try_load = parse_mod._try_load
    monkeypatch.setattr(parse_mod, "_try_load",
                        lambda *a: guessed.append(r := try_load(*a)) or r)
    seen_kinds: set[str] = set()
    modes = ("default", "latest", "ground-truth", "all")
    for mode, preds, oor in itertools.product(modes, (False, True), ("clip", "reject")):
        if writer == "json" and (preds, oor) not in ((False, "clip"), (True, "reject")):
            continue
        fast, slow = _parse_both(path, monkeypatch, annotations=mode, with_predictions=preds,
                                 out_of_range=oor)
        _assert_same(fast, slow)
        seen_kinds |= set(fast.stats.results)
    fast, slow = _parse_both(path, monkeypatch, labels={"c1": ["dog", "cat"], "bbox": ["car"]})
    _assert_same(fast, slow)
    if flavour != "json-min":
        assert set(TYPES) | {"relation"} <= seen_kinds
    assert any(guessed) == (writer == "orjson")


@pytest.mark.slow
def test_fast_equals_generic_clean_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Common shapes only, where the fast paths take (nearly) every batch."""
    path = tmp_path / "clean.json"
    path.write_bytes(orjson.dumps(mixed_export(3000, seed=2, odd=0.0)))
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 50000)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 50000)
    for preds in (False, True):
        fast, slow = _parse_both(path, monkeypatch, annotations="all", with_predictions=preds)
        _assert_same(fast, slow)
        assert fast.table.count("boxes") > 1000 and fast.table.count("polygons") > 1000


def _box_task(i: int, caption: str = "") -> dict:
    res = [{"id": f"r{i}", "from_name": "bbox", "to_name": "image", "type": "rectanglelabels",
            "original_width": 64, "original_height": 48,
            "value": {"x": i % 90, "y": 1, "width": 2, "height": 3, "rotation": 0,
                      "rectanglelabels": ["cat"]}},
           {"id": f"t{i}", "from_name": "cap", "type": "textarea",
            "value": {"text": [caption or f"caption {i}"]}}]
    return {"id": i, "annotations": [{"id": i, "result": res}], "data": {"image": f"{i}.jpg"}}


def test_guessed_chunk_ends_match_the_byte_scan(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.annotations import scan
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 3000)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 3000)
    p = tmp_path / "e.json"
    raw = json.dumps([_box_task(i) for i in range(400)], indent=1).encode()
    p.write_bytes(raw)
    buf = np.frombuffer(raw, np.uint8)
    fast = list(scan.fast_chunks(buf, "e", 3000, lambda s, e: orjson.loads(
        b"[" + raw[s:e] + b"]")))
    assert all(x[3] is not None for x in fast[:-1])  # every chunk but the last guessed
    assert [x[:3] for x in fast] == list(scan.element_chunks(buf, "e", 3000))
    whole = parse_export(p).table
    data_first = [{"data": t["data"], **t} for t in (_box_task(i) for i in range(400))]
    raw = orjson.dumps(data_first)  # opens with an object: the first key and brace are guessed
    buf = np.frombuffer(raw, np.uint8)
    fast = list(scan.fast_chunks(buf, "e", 3000, lambda s, e: orjson.loads(
        b"[" + raw[s:e] + b"]")))
    assert all(x[3] is not None for x in fast[:-1])
    assert [x[:3] for x in fast] == list(scan.element_chunks(buf, "e", 3000))
    p.write_bytes(raw)
    np.testing.assert_array_equal(parse_export(p).table.columns["boxes.xywhr"],
                                  whole.columns["boxes.xywhr"])
    # Nested objects that open like a task (a guess inside a task is refused) and a caption
    # holding one (a quote inside a string is escaped: never a guess).
    fake = [{"id": k, "annotations": [], "data": {}} for k in range(30)]
    tasks = [{**_box_task(i, str(fake)), "meta": {"history": fake}} for i in range(400)]
    p.write_bytes(orjson.dumps(tasks))
    tricky = parse_export(p).table
    assert tricky.num_samples == 400 and tricky.texts("texts.text")[5] == str(fake)
    np.testing.assert_array_equal(tricky.columns["boxes.xywhr"], whole.columns["boxes.xywhr"])
    np.testing.assert_array_equal(tricky.columns["task_id"], np.arange(400))


def test_guessed_chunks_keep_error_offsets(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.errors import UserError
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 3000)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 3000)
    good = orjson.dumps([_box_task(i) for i in range(400)])
    bad = good.replace(b'"id":250,', b'"id":250x,', 1)
    p = tmp_path / "bad.json"
    p.write_bytes(bad)
    with pytest.raises(UserError, match=f"malformed JSON at byte {bad.index(b'250x') + 3} "):
        parse_export(p)
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(UserError, match="malformed JSON at byte"):
        parse_export(p)
    p.write_bytes(good + b' {"id": 1}')
    with pytest.raises(UserError, match="data after the top-level list"):
        parse_export(p)
    cut = good.index(b'{"id":300,')
    p.write_bytes(good[:cut] + good[cut:].replace(b"]", b"", 1))
    with pytest.raises(UserError, match="malformed JSON"):
        parse_export(p)
