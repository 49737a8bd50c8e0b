"""Hostile inputs at the command line: each ends in one ``error:`` line naming the input and
the fix (or is imported safely), and nothing reaches the terminal raw."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from npu_data.cli import main
from npu_data.commands.inspect import plain
from npu_data.shards.reader import ShardDataset

EVIL = "ca\x1b[31mt\nsamples                999\u202e"  # an escape, a fake output line, RTL


def _box(rid: str, label: str, x: float = 10, w: float = 20) -> dict[str, Any]:
    return {"id": rid, "from_name": "bbox", "to_name": "image", "type": "rectanglelabels",
            "original_width": 96, "original_height": 64,
            "value": {"x": x, "y": 10, "width": w, "height": 20, "rotation": 0,
                      "rectanglelabels": [label]}}


def _export(root: Path, images: list[tuple[str, Image.Image]],
            results: list[list[dict[str, Any]]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tasks = []
    for i, ((name, im), res) in enumerate(zip(images, results, strict=True)):
        im.save(root / name)
        tasks.append({"id": i + 1, "data": {"image": name},
                      "annotations": [{"id": i + 1, "result": res}]})
    path = root / "export.json"
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path


def _one_error(capsys: pytest.CaptureFixture[str], rc: int, *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _rgb(w: int = 96, h: int = 64) -> Image.Image:
    return Image.fromarray(np.full((h, w, 3), 90, np.uint8))


def test_inspect_escapes_label_and_control_names(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    export = _export(tmp_path / "p", [("a.png", _rgb())], [[_box("b1", EVIL)]])
    assert main(["import", str(export), "--out", str(tmp_path / "ds")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "ca\\x1b[31mt\\nsamples                999\\u202e" in out
    assert [ln for ln in out.splitlines() if ln.startswith("  samples  ")] == [
        "  samples                1"]  # the label's newline made no output line
    assert plain("tab\there") == "tab\\there" and plain("é ok") == "é ok"


@pytest.mark.parametrize("pattern", ["x-%d-%d.tar", "x-%.tar", "x-%%.tar", "x.tar",
                                     "x-%(n)d.tar", "dir-%d/x.tar"])
def test_export_wds_bad_patterns_are_one_line(tmp_path: Path, pattern: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    export = _export(tmp_path / "p", [("a.png", _rgb())], [[_box("b1", "cat")]])
    assert main(["import", str(export), "--out", str(tmp_path / "ds")]) == 0
    capsys.readouterr()
    rc = main(["export-wds", str(tmp_path / "ds"), "--out", str(tmp_path / pattern)])
    _one_error(capsys, rc, "--out", repr(str(tmp_path / pattern)), "%06d")
    assert not list(tmp_path.glob("*.tar")) and not list(tmp_path.glob("*manifest.json"))
    ok = str(tmp_path / "100%%-x-%03d.tar")  # a literal % beside the number
    assert main(["export-wds", str(tmp_path / "ds"), "--out", ok]) == 0
    assert (tmp_path / "100%-x-000.tar").is_file()


def test_deeply_nested_export_with_nan_is_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / "deep.json"
    path.write_bytes(b'[{"id": 1, "data": {"image": "a.png"}, "x": NaN, "y": ' + deep + b"}]")
    rc = main(["import", str(path), "--out", str(tmp_path / "ds")])
    _one_error(capsys, rc, "deep.json", "nested too deeply", "fix the file")
    assert not (tmp_path / "ds").exists()


def test_pixel_cap_rejects_from_the_header_and_can_be_raised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bomb = Image.new("1", (10_000, 10_000))  # 100 Mpx: an 11 KB PNG, 300 MB decoded
    export = _export(tmp_path / "p", [("bomb.png", bomb), ("ok.png", _rgb())],
                     [[_box("b1", "cat")], [_box("b2", "cat")]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)  # never raised raw
        assert main(["import", str(export), "--out", str(tmp_path / "ds"),
                     "--max-rejected", "1"]) == 0
    out, err = capsys.readouterr()
    assert "imported 1 of 2 tasks" in out and "DecompressionBomb" not in err
    (rej,) = [json.loads(x) for x in (tmp_path / "ds" / "rejected.jsonl").read_text().splitlines()]
    assert rej["task_id"] == 1 and "10000x10000 = 100000000 pixels, over the limit of 89478485" \
        in rej["reason"] and "raise --max-pixels" in rej["reason"]
    assert len(ShardDataset(tmp_path / "ds")) == 1
    # a small cap, raised: the flag is the fix the reason names
    small = _export(tmp_path / "q", [("a.png", _rgb(40, 30))], [[_box("b1", "cat")]])
    assert main(["import", str(small), "--out", str(tmp_path / "s1"), "--max-pixels",
                 "1000"]) == 1  # nothing imported: never exit 0
    assert "imported 0 of 1" in capsys.readouterr().out
    assert main(["import", str(small), "--out", str(tmp_path / "s2"), "--max-pixels",
                 "1200"]) == 0
    assert "imported 1 of 1" in capsys.readouterr().out
    rc = main(["import", str(small), "--out", str(tmp_path / "s3"), "--max-pixels", "0"])
    _one_error(capsys, rc, "--max-pixels 0", "positive")


def test_box_at_absurd_coordinates_is_rejected_or_clipped_inside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = [[_box("far", "cat", x=1e308, w=1e308)],  # wholly outside: nothing to clip to
               [_box("edge", "cat", x=96, w=10)],      # past the right edge: clipped there
               [_box("left", "cat", x=-5, w=10)]]      # before the left edge: clipped there
    export = _export(tmp_path / "p", [(f"{i}.png", _rgb()) for i in range(3)], results)
    assert main(["import", str(export), "--out", str(tmp_path / "ds"), "--max-rejected",
                 "1"]) == 0
    assert "imported 2 of 3 tasks" in capsys.readouterr().out
    (rej,) = [json.loads(x) for x in (tmp_path / "ds" / "rejected.jsonl").read_text().splitlines()]
    assert rej["task_id"] == 1 and "'far'" in rej["reason"] and "outside the image" \
        in rej["reason"]
    ds = ShardDataset(tmp_path / "ds")
    for i, want in enumerate([[92.16, 6.4, 3.84, 12.8], [0.0, 6.4, 4.8, 12.8]]):
        got = ds[i]["boxes.xywhr"][0, :4]
        np.testing.assert_allclose(got, want, atol=1e-4)
        x0, y0, x1, y1 = ds[i]["boxes.xyxy"][0]
        assert 0 <= x0 <= x1 <= 96 and 0 <= y0 <= y1 <= 64
