"""npu-data pull against a real Label Studio server: values sent == values in the shards."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from npu_data.cli import main
from npu_data.shards.reader import ShardDataset

pytestmark = [pytest.mark.labelstudio, pytest.mark.slow]  # starts a real Label Studio server

CONFIG = """<View>
  <Image name="image" value="$image"/>
  <RectangleLabels name="box" toName="image"><Label value="cat"/><Label value="dog"/></RectangleLabels>
  <PolygonLabels name="poly" toName="image"><Label value="road"/><Label value="tree"/></PolygonLabels>
  <TextArea name="caption" toName="image"/>
</View>"""
SIZES = [(64, 48), (80, 40), (50, 70)]  # (width, height)


def _box(rid: str, w: int, h: int, x: float, y: float, bw: float, bh: float, rot: float,
         label: str) -> dict:
    return {"id": rid, "type": "rectanglelabels", "from_name": "box", "to_name": "image",
            "original_width": w, "original_height": h, "image_rotation": 0,
            "value": {"x": x, "y": y, "width": bw, "height": bh, "rotation": rot,
                      "rectanglelabels": [label]}}


def _poly(rid: str, w: int, h: int, pts: list[list[float]], label: str) -> dict:
    return {"id": rid, "type": "polygonlabels", "from_name": "poly", "to_name": "image",
            "original_width": w, "original_height": h, "image_rotation": 0,
            "value": {"points": pts, "closed": True, "polygonlabels": [label]}}


def _caption(text: str) -> dict:
    return {"id": "c1", "type": "textarea", "from_name": "caption", "to_name": "image",
            "value": {"text": [text]}}


@pytest.fixture(scope="module")
def project(labelstudio):  # type: ignore[no-untyped-def]
    from label_studio_sdk import LabelStudio

    ls = LabelStudio(base_url=labelstudio.url, api_key=labelstudio.token)
    pid = ls.projects.create(title="npu-data integration", label_config=CONFIG).id
    rng = np.random.default_rng(7)
    images = {}
    files = {}
    for i, (w, h) in enumerate(SIZES):
        px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(px).save(buf, "PNG")
        files[f"file{i}"] = (f"img{i}.png", buf.getvalue(), "image/png")
        images[f"img{i}.png"] = px
    r = httpx.post(f"{labelstudio.url}/api/projects/{pid}/import", files=files,
                   headers={"Authorization": f"Token {labelstudio.token}"}, timeout=60)
    assert r.status_code == 201, r.text
    second = ls.users.create(username="annotator2", email="annotator2@example.com",
                             password="annotator2-pass", active_organization=1).id
    tasks = sorted(ls.tasks.list(project=pid), key=lambda t: t.id)
    assert len(tasks) == 3
    sent: dict[str, list[dict]] = {}
    for t, (w, h) in zip(tasks, SIZES, strict=True):
        name = t.data["image"].rsplit("-", 1)[1]
        w, h = images[name].shape[1], images[name].shape[0]
        n = int(name[3])
        res = [_box(f"b{n}", w, h, 10 + n, 20, 30, 40, 15.0 * n, "dog"),
               _poly(f"p{n}", w, h, [[5, 5], [50, 10], [30 + n, 60]], "tree"),
               _caption(f"caption of image {n}")]
        ls.annotations.create(t.id, result=res)
        sent[name] = res
        if n == 1:  # a second annotator
            extra = [_box("b9", w, h, 1, 2, 3, 4, -30.0, "cat")]
            ls.annotations.create(t.id, result=extra, completed_by=second)
            sent[name] = res + extra
        if n == 2:  # a cancelled annotation must not reach the shards
            ls.annotations.create(t.id, result=[_box("bx", w, h, 60, 60, 5, 5, 0, "cat")],
                                  was_cancelled=True)
    ls.predictions.create(task=tasks[0].id, model_version="m1", score=0.5,
                          result=[_box("pr", SIZES[0][0], SIZES[0][1], 1, 1, 9, 9, 0, "cat")])
    return pid, images, sent


def test_pull_import_matches_sent_values(labelstudio, project, tmp_path: Path,  # type: ignore[no-untyped-def]
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pid, images, sent = project
    tok = tmp_path / "token"
    tok.write_text(labelstudio.token + "\n")
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    out = tmp_path / "pulled"
    rc = main(["pull", "--url", labelstudio.url, "--project", str(pid), "--out", str(out),
               "--token-file", str(tok), "--snapshot", "--download-resources",
               "--import", "--annotations", "all"])
    assert rc == 0
    assert (out / "label_config.xml").read_text() == CONFIG
    ds = ShardDataset(out / "shards")
    assert len(ds) == 3
    seen = set()
    for i in range(len(ds)):
        s = ds[i]
        h, w = s["image"].shape[:2]
        name = next(k for k, v in images.items() if v.shape[:2] == (h, w))
        seen.add(name)
        np.testing.assert_array_equal(s["image"], images[name])
        res = sent[name]
        boxes = [r for r in res if r["type"] == "rectanglelabels"]
        assert len(s["boxes.xywhr"]) == len(boxes)  # cancelled annotation left out
        labels = ds.labels["box"]
        for b in boxes:
            v = b["value"]
            exp = np.array([v["x"] * w / 100, v["y"] * h / 100, v["width"] * w / 100,
                            v["height"] * h / 100, v["rotation"]], np.float32)
            j = s["boxes.rid"].index(b["id"])
            np.testing.assert_allclose(s["boxes.xywhr"][j], exp, rtol=1e-6)
            assert labels[int(s["boxes.label"][j])] == v["rectanglelabels"][0]
        poly = next(r for r in res if r["type"] == "polygonlabels")
        exp_pts = np.array(poly["value"]["points"], np.float64) * [w / 100, h / 100]
        np.testing.assert_allclose(s["polygons.points"], exp_pts.astype(np.float32), rtol=1e-6)
        assert ds.labels["poly"][int(s["polygons.label"][0])] == "tree"
        assert s["caption"] == res[2]["value"]["text"][0]
        assert len(set(s["boxes.annotation"].tolist())) == (2 if name == "img1.png" else 1)
    assert seen == set(images)
    # the rerun resumes: media already complete is not fetched again
    env_out = tmp_path / "again"
    for f in (out / "media").rglob("*.png"):
        dst = env_out / f.relative_to(out)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(f.read_bytes())
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", labelstudio.token)
    assert main(["pull", "--url", labelstudio.url, "--project", str(pid), "--out",
                 str(env_out), "--with-predictions", "--download-resources"]) == 0
    tasks = json.loads((env_out / "export.json").read_bytes())
    preds = [p for t in tasks for p in t.get("predictions", [])]
    assert len(preds) == 1 and preds[0]["result"][0]["id"] == "pr"  # full objects, not ids
    assert not list(env_out.rglob("*.part"))


def test_pull_errors_are_one_line(labelstudio, project, tmp_path: Path,  # type: ignore[no-untyped-def]
                                  capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pid = project[0]
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "not-the-right-token")
    assert main(["pull", "--url", labelstudio.url, "--project", str(pid), "--out",
                 str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "legacy token (401)" in err and "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN" in err
    assert "not-the-right-token" not in err
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", labelstudio.token)
    assert main(["pull", "--url", labelstudio.url, "--project", "999", "--out",
                 str(tmp_path / "y")]) == 1
    err = capsys.readouterr().err  # read once: a second readouterr() sees nothing
    assert "project 999: not found" in err
    assert os.environ["LABEL_STUDIO_API_KEY"] not in err
