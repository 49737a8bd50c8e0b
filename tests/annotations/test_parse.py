"""parse_export against the real sample export and hand-made variants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from label_studio_sdk.converter.brush import decode_rle as sdk_decode

from npu_data.annotations import load_export_meta, parse_export, scan
from npu_data.errors import UserError

# A real export made by a Label Studio 1.23.2 server (copied from shared/reference/).
SAMPLE = Path(__file__).parent / "data" / "labelstudio-export-sample.json"


def _write(tmp_path: Path, obj: object, name: str = "export.json") -> Path:
    p = tmp_path / name
    p.write_bytes(orjson.dumps(obj))
    return p


def _box(rid: str, x: float, label: str = "cat", ctrl: str = "bbox", **kw: object) -> dict:
    return {"id": rid, "from_name": ctrl, "to_name": "image", "type": "rectanglelabels",
            "original_width": 200, "original_height": 100,
            "value": {"x": x, "y": 10, "width": 20, "height": 30, "rotation": 0,
                      "rectanglelabels": [label]}, **kw}


def _task(tid: int, anns: list, **kw: object) -> dict:
    return {"id": tid, "data": {"image": f"/data/upload/1/{tid}.jpg"}, "annotations": anns, **kw}


def _ann(aid: int, results: list, **kw: object) -> dict:
    return {"id": aid, "result": results, "was_cancelled": False, "ground_truth": False,
            "created_at": f"2026-01-0{aid}T00:00:00Z", "updated_at": f"2026-01-0{aid}T00:00:00Z",
            **kw}


def test_real_sample_every_value() -> None:
    tasks = json.loads(SAMPLE.read_text())
    res = parse_export(SAMPLE)
    t = res.table
    t.validate()
    assert t.num_samples == len(tasks) and res.rejected == []
    assert t.columns["task_id"].tolist() == [x["id"] for x in tasks]
    assert t.texts("image_ref") == [x["data"]["image"] for x in tasks]
    assert [json.loads(s) for s in t.texts("data_json")] == [x["data"] for x in tasks]
    ann = [a for a in tasks[0]["annotations"] if not a["was_cancelled"]][0]
    rs = ann["result"]
    assert t.columns["width"].tolist() == [rs[0]["original_width"], 0]
    assert t.columns["height"].tolist() == [rs[0]["original_height"], 0]
    by_type: dict[str, list[dict]] = {}
    for r in rs:
        by_type.setdefault(r["type"], []).append(r)
    controls = sorted({r["from_name"] for r in rs if "from_name" in r})
    assert t.controls == controls

    def lab(group: str, i: int) -> str | None:
        return t.label_name(int(t.columns[f"{group}.control"][i]),
                            int(t.columns[f"{group}.label"][i]))

    b = by_type["rectanglelabels"][0]
    v = b["value"]
    assert t.rows("boxes", 0) == slice(0, 1) and t.rows("boxes", 1) == slice(1, 1)
    assert t.columns["boxes.xywhr"][0].tolist() == [v["x"], v["y"], v["width"], v["height"],
                                                   v["rotation"]]
    assert lab("boxes", 0) == v["rectanglelabels"][0] and t.texts("boxes.rid") == [b["id"]]
    assert t.columns["boxes.annotation"].tolist() == [ann["id"]]
    assert np.isnan(t.columns["boxes.score"][0])
    p = by_type["polygonlabels"][0]["value"]
    assert t.columns["polygons.points"].tolist() == [[float(a), float(c)] for a, c in p["points"]]
    assert t.columns["polygons.closed"].tolist() == [int(p["closed"])]
    k = by_type["keypointlabels"][0]["value"]
    assert t.columns["keypoints.xy"].tolist() == [[k["x"], k["y"]]]
    assert t.columns["keypoints.size"].tolist() == [k["width"]] and lab("keypoints", 0) == "eye"
    e = by_type["ellipselabels"][0]["value"]
    assert t.columns["ellipses.params"][0].tolist() == [e["x"], e["y"], e["radiusX"],
                                                       e["radiusY"], e["rotation"]]
    br = by_type["brushlabels"][0]
    h, w = br["original_height"], br["original_width"]
    expect = sdk_decode(br["value"]["rle"]).reshape(h, w, 4)[:, :, 3] >= 128
    assert expect.any()
    assert t.columns["masks.height"].tolist() == [h] and t.columns["masks.width"].tolist() == [w]
    got = np.unpackbits(t.columns["masks.bits"])[: h * w].reshape(h, w).astype(bool)
    assert (got == expect).all()
    assert lab("choices", 0) == by_type["choices"][0]["value"]["choices"][0]
    assert t.texts("texts.text") == [x for r in by_type["textarea"] for x in r["value"]["text"]]
    assert t.texts("texts.rid") == [r["id"] for r in by_type["textarea"]]
    assert [json.loads(s) for s in t.texts("taxonomy.path")] == by_type["taxonomy"][0]["value"]["taxonomy"]
    assert t.columns["scalars.value"].tolist() == [by_type["rating"][0]["value"]["rating"],
                                                  by_type["number"][0]["value"]["number"]]
    assert t.columns["scalars.kind"].tolist() == [0, 1]
    rel = by_type["relation"][0]
    assert t.texts("relations.from_rid") == [rel["from_id"]]
    assert t.texts("relations.to_rid") == [rel["to_id"]]
    assert json.loads(t.text("relations.labels", 0)) == rel["labels"]
    assert res.stats.cancelled_skipped == 1 and res.stats.prediction_ids_ignored == 1
    assert res.stats.results["textarea"] == 2 and res.stats.flavour == "json"


def test_annotation_choice_modes(tmp_path: Path) -> None:
    anns = [_ann(1, [_box("a", 1)], ground_truth=True), _ann(2, [_box("b", 2)]),
            _ann(3, [_box("c", 3)], was_cancelled=True)]
    p = _write(tmp_path, [_task(1, anns)])
    xs = {m: parse_export(p, annotations=m).table.columns["boxes.xywhr"][:, 0].tolist()
          for m in ("default", "latest", "ground-truth", "all")}
    assert xs == {"default": [1.0], "latest": [2.0], "ground-truth": [1.0], "all": [1.0, 2.0]}
    r = parse_export(p, annotations="all")
    assert r.table.columns["boxes.annotation"].tolist() == [1, 2]
    assert r.stats.cancelled_skipped == 1
    with pytest.raises(UserError):
        parse_export(p, annotations="newest")  # type: ignore[arg-type]


def test_completions_flavour_and_predictions(tmp_path: Path) -> None:
    pred = {"id": 7, "score": 0.5, "result": [_box("p", 40)]}
    task = {"id": 3, "data": {"image": "a.jpg"}, "completions": [_ann(1, [_box("a", 1)])],
            "predictions": [pred]}
    p = _write(tmp_path, [task])
    r = parse_export(p)
    assert r.stats.flavour == "completions" and r.table.count("boxes") == 1
    r = parse_export(p, with_predictions=True)
    c = r.table.columns
    assert c["boxes.source"].tolist() == [0, 1] and c["boxes.annotation"].tolist() == [1, 7]
    assert c["boxes.score"][1] == np.float32(0.5) and r.stats.predictions_used == 1


def test_several_controls_and_config_labels(tmp_path: Path) -> None:
    res = [_box("a", 1, "dog", "b1"), _box("b", 2, "cat", "b2"), _box("c", 3, "ant", "b1")]
    p = _write(tmp_path, [_task(1, [_ann(1, res)])])
    t = parse_export(p).table
    assert t.controls == ["b1", "b2"] and t.labels == {"b1": ["ant", "dog"], "b2": ["cat"]}
    names = [t.label_name(int(c), int(lb)) for c, lb in
             zip(t.columns["boxes.control"], t.columns["boxes.label"], strict=True)]
    assert names == ["dog", "cat", "ant"]
    r = parse_export(p, labels={"b2": ["x", "cat"], "b1": ["dog"]})
    assert r.table.controls == ["b2", "b1"]
    assert r.table.labels == {"b2": ["x", "cat"], "b1": ["dog", "ant"]}
    assert r.table.columns["boxes.label"].tolist() == [0, 1, 1]
    assert r.stats.labels_not_in_config == {"b1": ["ant"]}


def test_json_min_rows_grouped(tmp_path: Path) -> None:
    def row(aid: int, x: float, upd: str) -> dict:
        return {"image": "/data/upload/1/a.jpg", "id": 5, "annotator": 1, "annotation_id": aid,
                "created_at": upd, "updated_at": upd, "lead_time": 1.0,
                "bbox": [{"x": x, "y": 1, "width": 2, "height": 3, "rotation": 0,
                          "rectanglelabels": ["cat"], "original_width": 64,
                          "original_height": 32}],
                "caption": ["hello"], "cls": "indoor"}
    rows = [row(1, 10, "2026-01-01"), row(2, 20, "2026-01-02"),
            {"image": "b.png", "id": 6, "annotator": None, "annotation_id": None}]
    p = _write(tmp_path, rows)
    r = parse_export(p, annotations="all")
    t = r.table
    assert r.stats.flavour == "json-min" and t.num_samples == 2
    assert t.columns["task_id"].tolist() == [5, 6]
    assert t.columns["boxes.xywhr"][:, 0].tolist() == [10.0, 20.0]
    assert t.columns["width"].tolist() == [64, 0] and t.texts("texts.text") == ["hello", "hello"]
    assert json.loads(t.text("data_json", 0)) == {"image": "/data/upload/1/a.jpg", "cls": "indoor"}
    t = parse_export(p).table
    assert t.columns["boxes.xywhr"][:, 0].tolist() == [20.0]
    r = parse_export(p, labels={"cls": ["indoor", "outdoor"], "caption": [], "bbox": ["cat"]})
    assert r.table.count("choices") == 1 and r.table.label_name(
        int(r.table.columns["choices.control"][0]), int(r.table.columns["choices.label"][0])) == "indoor"


def test_chunks_and_block_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [_task(i, [_ann(1, [_box(f"r{i}", i % 90,
                                     label='q"\\,]}' if i % 3 else "é€")])]) for i in range(300)]
    p = _write(tmp_path, tasks)
    whole = parse_export(p).table
    monkeypatch.setattr(scan, "BLOCK", 97)
    from npu_data.annotations import parse as parse_mod
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 500)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 500)
    small = parse_export(p).table
    assert small.num_samples == whole.num_samples == 300
    for k, v in whole.columns.items():
        np.testing.assert_array_equal(v, small.columns[k], err_msg=k)
    assert sorted(whole.labels["bbox"]) == sorted({'q"\\,]}', "é€"})


def test_malformed_json_byte_offset(tmp_path: Path) -> None:
    good = orjson.dumps([_task(1, []), _task(2, [])])
    bad = good.replace(b'"id":2', b'"id":2x')
    p = tmp_path / "bad.json"
    p.write_bytes(bad)
    with pytest.raises(UserError) as ei:
        parse_export(p)
    assert str(p) in str(ei.value) and f"byte {bad.index(b'2x') + 1}" in str(ei.value)
    p.write_bytes(good[:-20])
    with pytest.raises(UserError, match="malformed JSON at byte"):
        parse_export(p)
    p.write_bytes(b'{"tasks": []}')
    with pytest.raises(UserError, match="a list of tasks"):
        parse_export(p)
    p.write_bytes(b"")
    with pytest.raises(UserError, match="empty"):
        parse_export(p)


def test_unknown_types_and_no_image(tmp_path: Path) -> None:
    weird = {"id": "w", "type": "videorectangle", "from_name": "v", "value": {"sequence": []}}
    tasks = [_task(1, [_ann(1, [weird, _box("a", 5)])]),
             {"id": 2, "data": {"text": "no image here"}, "annotations": []}]
    r = parse_export(_write(tmp_path, tasks))
    assert r.stats.unknown_types == {"videorectangle": 1} and r.table.count("boxes") == 1
    assert r.table.num_samples == 1
    assert [(x.index, x.task_id) for x in r.rejected] == [(1, 2)]
    assert "no image reference" in r.rejected[0].reason


def test_out_of_range_clip_vs_reject(tmp_path: Path) -> None:
    p = tmp_path / "e.json"
    tasks = [_task(1, [_ann(1, [_box("a", -5), _box("b", 50)])]),
             _task(2, [_ann(1, [_box("c", 30)])])]
    p.write_text(json.dumps(tasks + [_task(3, [_ann(1, [_box("d", float("nan"))])])]))
    r = parse_export(p)  # out of range is clipped; NaN is no coordinate: rejected, never 0
    assert r.stats.clipped == 2 and r.table.num_samples == 2  # x and width: clipped by edges
    assert r.table.columns["boxes.xywhr"][:, 0].tolist() == [0.0, 50.0, 30.0]
    assert r.table.columns["boxes.xywhr"][:, 2].tolist() == [15.0, 20.0, 20.0]  # -5..15
    assert [x.task_id for x in r.rejected] == [3]
    assert r.rejected[0].reason == ("task 3: result 'd' (rectanglelabels): field 'x' = nan is "
                                    "not a finite number — fix the export")
    r = parse_export(p, out_of_range="reject")
    assert r.table.columns["task_id"].tolist() == [2]
    assert [x.task_id for x in r.rejected] == [1, 3] and "x=-5 " in r.rejected[0].reason
    assert "field 'x' = nan" in r.rejected[1].reason
    assert r.table.columns["boxes.xywhr"][:, 0].tolist() == [30.0]


def test_multi_label_and_unlabeled_regions(tmp_path: Path) -> None:
    def box(rid: str, labs: list[str]) -> dict:
        return {"id": rid, "from_name": "b", "type": "rectanglelabels",
                "value": {"x": 1, "y": 1, "width": 1, "height": 1, "rectanglelabels": labs}}
    res = [box("a", ["x"]), box("b", ["y", "z"]), box("c", []), box("d", ["x"])]
    t = parse_export(_write(tmp_path, [_task(1, [_ann(1, res)])])).table
    assert t.texts("boxes.rid") == ["a", "b", "b", "c", "d"]
    names = [t.label_name(0, int(lb)) for lb in t.columns["boxes.label"]]
    assert names == ["x", "y", "z", None, "x"]


def test_json_min_rows_apart_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.annotations import parse as parse_mod
    monkeypatch.setattr(parse_mod, "CHUNK_MIN", 1)
    monkeypatch.setattr(parse_mod, "CHUNK_MAX", 1)  # one row per chunk

    def row(tid: int, aid: int, x: float, upd: str) -> dict:
        return {"image": f"{tid}.jpg", "id": tid, "annotation_id": aid, "updated_at": upd,
                "bbox": [{"x": x, "y": 1, "width": 2, "height": 3, "rectanglelabels": ["c"],
                          "original_width": 10 * tid, "original_height": 5}]}
    rows = [row(1, 1, 10, "2026-01-02"), row(2, 2, 20, "2026-01-01"),
            row(1, 3, 30, "2026-01-01"), row(2, 4, 40, "2026-01-03"), row(3, 5, 150, "x")]
    p = _write(tmp_path, rows)
    r = parse_export(p, annotations="all")  # x=150: wholly outside, nothing to clip to
    t = r.table
    assert t.columns["task_id"].tolist() == [1, 2]
    assert t.columns["boxes.xywhr"][:, 0].tolist() == [10.0, 30.0, 20.0, 40.0]
    assert t.columns["width"].tolist() == [10, 20]
    assert [(x.index, x.task_id) for x in r.rejected] == [(4, 3)]
    assert "lies outside the image" in r.rejected[0].reason
    t = parse_export(p).table  # latest per task
    assert t.columns["boxes.annotation"].tolist() == [1, 4]
    r = parse_export(p, out_of_range="reject")
    assert r.table.columns["task_id"].tolist() == [1, 2]
    assert [(x.index, x.task_id) for x in r.rejected] == [(4, 3)]
    assert load_export_meta(p) == {"flavour": "json-min", "bytes": p.stat().st_size}
    late = [row(1, 1, 10, "a"), row(2, 2, 20, "b"), row(1, 3, -5, "c")]
    r = parse_export(_write(tmp_path, late, "late.json"), annotations="all",
                     out_of_range="reject")
    assert r.table.columns["task_id"].tolist() == [2]
    assert r.table.columns["boxes.xywhr"][:, 0].tolist() == [20.0]
    assert [(x.index, x.task_id) for x in r.rejected] == [(0, 1)] and "x=-5" in r.rejected[0].reason


def test_non_numeric_coordinate_rejected_never_zero(tmp_path: Path) -> None:
    # the old test read a NaN x as 0.0: a coordinate that is not a number rejects its task
    xs: list[object] = [10, "ten", None, float("nan")]
    tasks = [_task(i + 1, [_ann(1, [_box("asnf"[i], x)])]) for i, x in enumerate(xs)]  # type: ignore[arg-type]
    p = tmp_path / "e.json"
    p.write_text(json.dumps(tasks))
    r = parse_export(p)
    assert r.table.columns["task_id"].tolist() == [1]
    assert r.table.columns["boxes.xywhr"][:, 0].tolist() == [10.0]
    assert [(x.task_id, x.reason) for x in r.rejected] == [
        (2, "task 2: result 's' (rectanglelabels): field 'x' = 'ten' is not a finite number — "
            "fix the export"),
        (3, "task 3: result 'n' (rectanglelabels): field 'x' = None is not a finite number — "
            "fix the export"),
        (4, "task 4: result 'f' (rectanglelabels): field 'x' = nan is not a finite number — "
            "fix the export")]


def test_gc_paused_only_while_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from npu_data.annotations import parse as parse_mod

    seen: list[bool] = []
    chunk = parse_mod._Parser.chunk

    def spy(self: parse_mod._Parser, tasks: list, first: int) -> None:
        seen.append(gc.isenabled())
        if any(isinstance(t, dict) and t.get("id") == 99 for t in tasks):
            raise RuntimeError("boom")  # an unexpected error inside the parser
        chunk(self, tasks, first)

    monkeypatch.setattr(parse_mod._Parser, "chunk", spy)
    good = _write(tmp_path, [_task(1, [_ann(1, [_box("a", 10)])])])
    assert gc.isenabled()
    assert parse_export(good).table.num_samples == 1
    assert seen == [False] and gc.isenabled()  # paused during the parse, restored after
    with pytest.raises(RuntimeError, match="boom"):
        parse_export(_write(tmp_path, [_task(99, [])], "boom.json"))
    assert gc.isenabled()
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'[{"id": 1, "data": {"image": "a.jpg"}}, {"id": ]')
    with pytest.raises(UserError, match="malformed JSON"):
        parse_export(bad)
    assert gc.isenabled()
    gc.disable()  # a caller that paused the collector itself keeps it paused
    try:
        parse_export(good)
        assert not gc.isenabled()
    finally:
        gc.enable()
