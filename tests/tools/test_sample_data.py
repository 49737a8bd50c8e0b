"""The built-in sample data: deterministic, valid Label Studio exports, masks that decode."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from label_studio_sdk.converter.brush import decode_rle
from PIL import Image

from npu_data.errors import UserError
from npu_data.tools.sample_data import (
    encode_rle,
    make_bench_images,
    make_sample_project,
    mask_to_rle,
    scene_for,
)

IMAGE_TYPES = {"rectanglelabels", "polygonlabels", "keypointlabels", "ellipselabels",
               "brushlabels", "choices", "textarea", "taxonomy", "rating", "number"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_sample_project(tmp_path_factory.mktemp("sample"), n_images=8, width=160,
                               height=120, seed=3)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_same_arguments_give_identical_bytes(tmp_path: Path, project) -> None:  # type: ignore[no-untyped-def]
    again = make_sample_project(tmp_path, n_images=8, width=160, height=120, seed=3)
    assert _files(again.root) == _files(project.root)
    other = make_sample_project(tmp_path / "other", n_images=8, width=160, height=120, seed=4)
    assert _files(other.root)["export.json"] != _files(project.root)["export.json"]


def test_export_covers_every_image_result_type(project) -> None:  # type: ignore[no-untyped-def]
    tasks = json.loads(project.export_path.read_text())
    assert [t["id"] for t in tasks] == list(range(1, 9))
    results = [r for t in tasks for a in t["annotations"] for r in a["result"]]
    types = {r["type"] for r in results}
    assert IMAGE_TYPES | {"relation"} <= types
    assert any(r["type"] == "rectanglelabels" and r["value"]["rotation"] > 0 for r in results)
    # annotators, cancelled, ground truth, predictions, an unlabeled task
    assert any(len({a["completed_by"] for a in t["annotations"]}) > 1 for t in tasks)
    cancelled = [a for t in tasks for a in t["annotations"] if a["was_cancelled"]]
    assert len(cancelled) == 1 and cancelled[0]["result"] == []
    assert tasks[1]["cancelled_annotations"] == 1
    assert sum(a["ground_truth"] for t in tasks for a in t["annotations"]) == 1
    preds = [p for t in tasks for p in t["predictions"]]
    assert preds and all(0 < r["score"] <= 1 for p in preds for r in p["result"])
    assert tasks[-1]["annotations"] == [] and tasks[-1]["total_annotations"] == 0
    # the image caption is the first text of every labeled task (per-region notes follow)
    for t in tasks[:-1]:
        texts = [r for r in t["annotations"][0]["result"] if r["type"] == "textarea"]
        assert texts[0]["from_name"] == "caption" and "background" in texts[0]["value"]["text"][0]
        assert any(r["from_name"] == "note" for r in texts)
    # relations point at regions of the same annotation
    for t in tasks:
        for a in t["annotations"]:
            ids = {r["id"] for r in a["result"] if "id" in r}
            for r in a["result"]:
                if r["type"] == "relation":
                    assert r["from_id"] in ids and r["to_id"] in ids


def test_config_names_every_control_used(project) -> None:  # type: ignore[no-untyped-def]
    root = ET.fromstring(project.config_path.read_text())
    names = {el.get("name") for el in root.iter() if el.get("toName")}
    tasks = json.loads(project.export_path.read_text())
    used = {r["from_name"] for t in tasks for a in t["annotations"] + t["predictions"]
            for r in a["result"] if "from_name" in r}
    assert used == names
    labels = {el.get("name"): {c.get("value") for c in el.iter() if c.get("value")}
              for el in root.iter() if el.get("toName")}
    for t in tasks:
        for a in t["annotations"]:
            for r in a["result"]:
                key = r["type"]
                if key.endswith("labels") or key == "choices":
                    assert set(r["value"][key]) <= labels[r["from_name"]]


def test_images_are_textured_and_sized_as_exported(project) -> None:  # type: ignore[no-untyped-def]
    tasks = json.loads(project.export_path.read_text())
    for t in tasks:
        path = project.root / t["data"]["image"]
        with Image.open(path) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            pixels = np.asarray(im)
        for a in t["annotations"]:
            for r in a["result"]:
                if "original_width" in r:
                    assert (r["original_width"], r["original_height"]) == im.size
        assert pixels.std() > 20 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 2000
        # neighbouring pixels differ: grain, not flat colour
        assert np.abs(np.diff(pixels.astype(int), axis=1)).mean() > 2
    assert any(Image.open(project.root / t["data"]["image"]).size == (120, 160) for t in tasks)


def test_brush_rle_decodes_to_the_drawn_disc(project) -> None:  # type: ignore[no-untyped-def]
    tasks = json.loads(project.export_path.read_text())
    checked = 0
    for i, t in enumerate(tasks):
        for a in t["annotations"]:
            for r in a["result"]:
                if r["type"] != "brushlabels":
                    continue
                w, h = r["original_width"], r["original_height"]
                rgba = decode_rle(r["value"]["rle"]).reshape(h, w, 4)
                expected = scene_for(i, w, h, seed=3).disc_mask()
                assert expected.sum() > 50
                np.testing.assert_array_equal(rgba[..., 3] > 0, expected)
                checked += 1
    assert checked >= 6


def test_geometry_matches_the_scene(project) -> None:  # type: ignore[no-untyped-def]
    tasks = json.loads(project.export_path.read_text())
    scene = scene_for(1, 160, 120, seed=3)
    result = tasks[1]["annotations"][0]["result"]
    box = next(r for r in result if r["type"] == "rectanglelabels")
    x, y, w, h, rot = scene.rects[0]
    v = box["value"]
    assert math.isclose(v["x"] * 160 / 100, x) and math.isclose(v["height"] * 120 / 100, h)
    assert v["rotation"] == rot > 0
    ell = next(r for r in result if r["type"] == "ellipselabels")["value"]
    assert math.isclose(ell["x"] * 160 / 100, scene.disc[0])
    # the disc's envelope box contains every pixel of its mask
    env = next(r for r in result if r["type"] == "rectanglelabels"
               and r["value"]["rectanglelabels"] == ["disc"])["value"]
    ys, xs = np.nonzero(scene.disc_mask())
    assert xs.min() >= env["x"] * 1.6 - 1 and xs.max() + 1 <= (env["x"] + env["width"]) * 1.6 + 1
    assert ys.min() >= env["y"] * 1.2 - 1 and ys.max() + 1 <= (env["y"] + env["height"]) * 1.2 + 1


@pytest.mark.parametrize("n", [0, 1, 7, 70_000, 200_003])
def test_encode_rle_roundtrips_through_the_sdk(n: int) -> None:
    rng = np.random.default_rng(n)
    flat = np.zeros(n, dtype=np.uint8)
    if n:
        flat[: n // 3] = rng.integers(0, 256, n // 3)  # literals
        flat[n // 2: n // 2 + n // 5] = 255  # one long run (> 65536 for the big cases)
    np.testing.assert_array_equal(decode_rle(encode_rle(flat)), flat)


def test_mask_to_rle_matches_label_studio_layout() -> None:
    mask = np.zeros((5, 7), dtype=bool)
    mask[1:4, 2:6] = True
    rgba = decode_rle(mask_to_rle(mask)).reshape(5, 7, 4)
    assert (rgba[mask] == 255).all() and (rgba[~mask] == 0).all()


def test_bench_images_export(tmp_path: Path) -> None:
    proj = make_bench_images(tmp_path / "first", n=5, width=96, height=64, seed=1)
    tasks = json.loads(proj.export_path.read_text())
    assert len(tasks) == 5 and len(list(proj.images_dir.glob("*.jpg"))) == 5
    for t in tasks:
        (a,) = t["annotations"]
        kinds = [r["type"] for r in a["result"]]
        assert kinds.count("textarea") == 1 and kinds.count("rectanglelabels") >= 1
        for r in a["result"]:
            if r["type"] == "rectanglelabels":
                v = r["value"]
                assert 0 <= v["x"] and v["x"] + v["width"] <= 100
                assert 0 <= v["y"] and v["y"] + v["height"] <= 100
        assert Image.open(proj.root / t["data"]["image"]).size == (96, 64)
    again = make_bench_images(tmp_path / "again", n=5, width=96, height=64, seed=1)
    assert _files(again.root) == _files(proj.root)


def test_bad_arguments_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="n_images"):
        make_sample_project(tmp_path, n_images=0)
