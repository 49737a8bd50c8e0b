"""``npu-data import`` of folder sources (ImageFolder, kohya, Hugging Face imagefolder) and
JSON_MIN, read back with ``ShardDataset``, and the rules that keep an import from losing data
while it exits 0."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data import ShardDataset
from npu_data.cli import main

RNG = np.random.default_rng(7)


def _image(path: Path, size: tuple[int, int] = (12, 9)) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = RNG.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return pixels


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_DATA_QUIET", "1")


def _run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    got = capsys.readouterr()
    return code, got.out, got.err


def _data(ds: ShardDataset, i: int) -> dict:
    """Sample ``i``'s task data."""
    k, j = ds.locate(i)
    return json.loads(ds.shard(k).data_json(j))


# ------------------------------------------------------------------------- ImageFolder
def test_imagefolder_labels_order_and_pixels_as_torchvision(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    root = tmp_path / "train"
    pixels = {}
    # torchvision: classes = sorted folder names ('B' < 'a'), files walked recursively and
    # sorted, extensions matched case-insensitively, other files ignored
    for cls, names in {"a": ["2.png", "10.png"], "B": ["x.PNG", "deep/y.png"],
                       "c d": ["z.bmp"]}.items():
        for name in names:
            pixels[f"{cls}/{name}"] = _image(root / cls / name)
    (root / "a" / "notes.txt").write_text("not an image")
    code, out, err = _run(capsys, "import", root, "--out", tmp_path / "ds")
    assert code == 0, err
    assert "imported 5 of 5 tasks" in out and "imagefolder: 5 images in 3 classes" in err
    ds = ShardDataset(tmp_path / "ds")
    assert ds.manifest["labels"]["label"] == ["B", "a", "c d"]
    order = ["B/x.PNG", "B/deep/y.png", "a/10.png", "a/2.png", "c d/z.bmp"]  # a folder
    # before its sub-folders (sorted os.walk tuples), names sorted as strings
    assert len(ds) == len(order)
    for i, ref in enumerate(order):
        s = ds[i]
        assert ds.manifest["labels"]["label"][int(s["choices.label"][0])] == ref.split("/")[0]
        np.testing.assert_array_equal(s["image"], pixels[ref])


def test_imagefolder_empty_class_refused_and_nothing_written(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    root = tmp_path / "train"
    _image(root / "cat" / "1.png")
    (root / "dog").mkdir()
    code, _, err = _run(capsys, "import", root, "--out", tmp_path / "ds")
    assert code == 1 and "dog" in err and "hold no image" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]


# ------------------------------------------------------------------------------- kohya
def test_kohya_captions_repeats_and_class_tokens(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "kohya"
    _image(root / "10_sks dog" / "a.png")
    (root / "10_sks dog" / "a.txt").write_text("  a photo of sks dog  \nclose-up, grass\n\n")
    _image(root / "10_sks dog" / "b.jpg")  # no caption file: the folder's class tokens
    _image(root / "3_style" / "c.webp")
    (root / "3_style" / "c.caption").write_text("painting")
    _image(root / "misc" / "d.png")  # no repeat prefix: kohya skips it, and so do we, aloud
    code, out, err = _run(capsys, "import", root, "--out", tmp_path / "ds")
    assert code == 0, err
    assert "imported 3 of 3 tasks" in out
    assert "ignored 1 folder(s)" in err and "misc" in err
    ds = ShardDataset(tmp_path / "ds")
    got = {_data(ds, i)["image"]: (ds[i]["caption"], _data(ds, i)["repeats"],
                                        list(ds[i]["texts.text"])) for i in range(len(ds))}
    assert got == {
        "10_sks dog/a.png": ("a photo of sks dog", 10, ["a photo of sks dog", "close-up, grass"]),
        "10_sks dog/b.jpg": ("sks dog", 10, ["sks dog"]),
        "3_style/c.webp": ("painting", 3, ["painting"]),
    }


def test_kohya_caption_extension_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    root = tmp_path / "kohya"
    _image(root / "1_cat" / "a.png")
    (root / "1_cat" / "a.txt").write_text("from txt")
    (root / "1_cat" / "a.cap").write_text("from cap")
    code, _, err = _run(capsys, "import", root, "--out", tmp_path / "ds",
                        "--caption-extension", ".cap")
    assert code == 0, err
    assert ShardDataset(tmp_path / "ds")[0]["caption"] == "from cap"
    code, _, err = _run(capsys, "import", root, "--out", tmp_path / "ds2", "--format",
                        "imagefolder", "--caption-extension", ".cap")
    assert code == 1 and "--caption-extension is for kohya" in err


# ---------------------------------------------------------------------- HF imagefolder
def test_hf_imagefolder_metadata_jsonl_and_csv(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "hf"
    _image(root / "a.png")
    _image(root / "imgs" / "b.png")
    _image(root / "extra.png")  # in no metadata file: not imported, and said so
    with open(root / "metadata.jsonl", "w") as f:
        for name, text in (("a.png", "a red fox"), ("imgs/b.png", "ünïcode ✓ caption")):
            f.write(json.dumps({"file_name": name, "text": text, "score": 0.5}) + "\n")
    sub = root / "more"
    _image(sub / "c.png")
    with open(sub / "metadata.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file_name", "prompt"])
        w.writerow(["c.png", "a, quoted \"prompt\""])
    code, out, err = _run(capsys, "import", root, "--out", tmp_path / "ds")
    assert code == 0, err
    assert "imported 3 of 3 tasks" in out and "1 image(s)" in err and "extra.png" in err
    ds = ShardDataset(tmp_path / "ds")
    got = {_data(ds, i)["file_name"]: ds[i]["caption"] for i in range(len(ds))}
    assert got == {"a.png": "a red fox", "imgs/b.png": "ünïcode ✓ caption",
                   "c.png": 'a, quoted "prompt"'}


def test_hf_imagefolder_caption_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    root = tmp_path / "hf"
    _image(root / "a.png")
    (root / "metadata.jsonl").write_text(
        json.dumps({"file_name": "a.png", "text": "short", "long_caption": "the long one"}))
    assert _run(capsys, "import", root, "--out", tmp_path / "ds")[0] == 0
    assert ShardDataset(tmp_path / "ds", caption_field="long_caption")[0]["caption"] == \
        "the long one"
    assert ShardDataset(tmp_path / "ds")[0]["caption"] == "short"


# ---------------------------------------------------------------------------- JSON_MIN
def test_json_min_rows_without_ids_are_their_own_tasks(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    rows = []
    for i in range(6):
        _image(tmp_path / "img" / f"{i}.png", (40, 20))
        rows.append({"image": f"img/{i}.png", "text": f"caption {i}",
                     "label": [{"x": 10.0 * i, "y": 5.0, "width": 10.0, "height": 20.0,
                                "rectanglelabels": ["box"]}]})
    export = tmp_path / "min.json"
    export.write_text(json.dumps(rows))
    code, out, err = _run(capsys, "import", export, "--out", tmp_path / "ds")
    assert code == 0, err
    assert "imported 6 of 6 tasks" in out
    ds = ShardDataset(tmp_path / "ds")
    for i in range(6):  # each image keeps its own box (no merge onto the first image)
        s = ds[i]
        assert _data(ds, i)["image"] == f"img/{i}.png"
        np.testing.assert_allclose(s["boxes.xyxy"], [[4.0 * i, 1.0, 4.0 * i + 4.0, 5.0]],
                                   atol=1e-3)


def test_json_min_shared_id_with_another_image_is_rejected(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    _image(tmp_path / "a.png")
    _image(tmp_path / "b.png")
    rows = [{"id": 7, "image": "a.png", "annotator": 1, "text": "one"},
            {"id": 7, "image": "a.png", "annotator": 2, "text": "two"},  # a second annotator
            {"id": 7, "image": "b.png", "annotator": 3, "text": "three"}]
    export = tmp_path / "min.json"
    export.write_text(json.dumps(rows))
    code, out, err = _run(capsys, "import", export, "--out", tmp_path / "ds")
    assert code == 1 and "imported 1 of 3 tasks" in out
    assert "repeats task id 7 with another image" in err


# ------------------------------------------------------------------ nothing lost at exit 0
def _min_export(tmp_path: Path, n: int, missing: int = 0) -> Path:
    rows = []
    for i in range(n):
        if i >= missing:
            _image(tmp_path / "images" / f"{i}.png")
        rows.append({"image": f"images/{i}.png"})
    export = tmp_path / "export.json"
    export.write_text(json.dumps(rows))
    return export


def test_nothing_imported_exits_1_naming_the_images_root(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    export = _min_export(tmp_path, 4)
    # the references already start with images/: the root is one folder too deep
    code, out, err = _run(capsys, "import", export, "--out", tmp_path / "ds",
                          "--images-root", tmp_path / "images")
    assert code == 1 and "imported 0 of 4 tasks" in out
    assert "4 x" in err and "image file not found" in err and "one folder too deep" in err
    assert err.strip().splitlines()[-1].startswith("error: imported 0 of 4 tasks")
    assert main(["verify", str(tmp_path / "ds")]) == 1
    assert "0 samples" in capsys.readouterr().err


def test_max_rejected_count_and_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    export = _min_export(tmp_path, 10, missing=2)
    code, out, err = _run(capsys, "import", export, "--out", tmp_path / "a")
    assert code == 1 and "imported 8 of 10 tasks" in out and "--max-rejected" in err
    assert len(ShardDataset(tmp_path / "a")) == 8  # what was written is kept
    assert _run(capsys, "import", export, "--out", tmp_path / "b", "--max-rejected", "2")[0] == 0
    assert _run(capsys, "import", export, "--out", tmp_path / "c", "--max-rejected", "20%")[0] == 0
    assert _run(capsys, "import", export, "--out", tmp_path / "d", "--max-rejected", "19%")[0] == 1
    code, _, err = _run(capsys, "import", export, "--out", tmp_path / "e", "--max-rejected", "x")
    assert code == 1 and err.startswith("error: ") and "--max-rejected x" in err
    assert not (tmp_path / "e").exists()


def test_refusals_before_any_work_change_nothing(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    export = _min_export(tmp_path, 2)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, _, err = _run(capsys, "import", export, "--out", tmp_path / "ds", "--images-root",
                        tmp_path / "nowhere")
    assert code == 1 and "nowhere: no such folder" in err
    code, _, err = _run(capsys, "import", export, "--out", tmp_path / "images" / "ds",
                        "--images-root", tmp_path / "images")
    assert code == 1 and "inside the images' folder" in err
    code, _, err = _run(capsys, "import", tmp_path / "images", "--out",
                        tmp_path / "images" / "shards")
    assert code == 1 and "inside the images' folder" in err
    code, _, err = _run(capsys, "import", export, "--out", tmp_path / "x", "--format", "yaml")
    assert code == 1 and "unknown" in err and "kohya" in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_detection_names_what_it_looked_for(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = _run(capsys, "import", tmp_path / "empty", "--out", tmp_path / "ds")
    assert code == 1 and "class folders" in err and "--format" in err
    code, _, err = _run(capsys, "import", tmp_path / "absent", "--out", tmp_path / "ds")
    assert code == 1 and "no such file or folder" in err


def test_parse_progress_ends_done_at_the_file_size(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    export = _min_export(tmp_path, 2)
    size = export.stat().st_size
    monkeypatch.delenv("NPU_DATA_QUIET")
    code = main(["import", str(export), "--out", str(tmp_path / "ds")])
    err = capsys.readouterr().err
    assert code == 0
    parse = [ln for ln in err.splitlines() if ln.startswith("parse export.json")]
    assert parse and f"{size}/{size} B (100%) done" in parse[-1], err
    assert "stopped" not in err


# ------------------------------------------------------------ every source through the CLI
@pytest.mark.slow
def test_bench_sources_imports_every_format_through_the_command_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from npu_data.bench import import_sources

    assert import_sources.main(["--n", "6", "--repeat", "1", "--size", "16x12"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split()[0] for ln in out.splitlines()[1:]]
    assert rows == ["labelstudio", "imagefolder", "kohya", "hf-imagefolder", "coco",
                    "webdataset", "hf-parquet"], out


@pytest.mark.slow
def test_sources_detected_and_read_alike(tmp_path: Path) -> None:
    """Each source of the bench's generator, imported, holds its 6 samples with equal pixels
    and the captions or labels its layout gives."""
    from npu_data.bench.import_sources import make_sources, time_import

    sources = make_sources(tmp_path / "src", 6, (16, 12))
    pixels = None
    for name, args in sources.items():
        took, rc = time_import(args, tmp_path / "out" / name)
        assert rc == 0, name
        ds = ShardDataset(tmp_path / "out" / name)
        assert len(ds) == 6, name
        got = sorted(ds[i]["image"].tobytes() for i in range(6))
        pixels = pixels or got
        assert got == pixels, name  # one pixel rule: every source decodes the same JPEGs alike
        if name in ("kohya", "hf-imagefolder", "webdataset", "hf-parquet", "labelstudio"):
            assert all(ds[i]["caption"] for i in range(6)), name


def test_mixed_own_and_foreign_tars_refused(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from npu_data.bench.import_sources import make_sources

    sources = make_sources(tmp_path / "src", 4, (16, 12))
    assert _run(capsys, "import", *sources["labelstudio"], "--out", tmp_path / "ls")[0] == 0
    (tmp_path / "own").mkdir()
    assert main(["export-wds", str(tmp_path / "ls"), "--out",
                 str(tmp_path / "own" / "part-%06d.tar")]) == 0
    own = sorted((tmp_path / "own").glob("*.tar"))
    assert own
    code, _, err = _run(capsys, "import", *sources["webdataset"], *own, "--out",
                        tmp_path / "mixed")
    assert code == 1 and "did not write" in err and "separate folders" in err


def test_messages_point_the_right_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    export = _min_export(tmp_path, 1)
    code, _, err = _run(capsys, "import", export, "--out", tmp_path / "ds", "--storage-endpoint",
                        "localhost:9000")
    assert code == 1 and "no scheme — add it: http://localhost:9000" in err
    assert err.count("\n") == 1 and not (tmp_path / "ds").exists()
    code, _, err = _run(capsys, "inspect", export)
    assert code == 1 and "a file, not a dataset folder" in err
    assert f"npu-data import {export} --out DATASET" in err and "--out proj" not in err
