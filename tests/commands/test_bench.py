"""`npu-data bench` writes well-formed results (not a speed test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from npu_data.cli import main


def test_bench_writes_well_formed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--quick", "--images", "8", "--width", "64", "--height", "48",
               "--crop", "32", "--batch-size", "8", "--epochs", "1", "--device", "cpu",
               "--out", str(out), "--data-dir", str(tmp_path / "data")])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["images"] == 8 and res["config"]["crop"] == 32
    ok = {p["name"]: p for p in res["pipelines"] if p["status"] == "ok"}
    assert {"baseline", "npu_data_raw", "npu_data_encoded"} <= set(ok)
    for p in ok.values():
        assert len(p["epochs_img_s"]) == 1 and p["median_img_s"] > 0
        assert p["min_img_s"] <= p["median_img_s"] <= p["max_img_s"]
        assert p["peak_memory_mib"]["total"] >= p["peak_memory_mib"]["main"] > 10
        assert p["bound_by"] in p["stages_ms_per_img"]
        assert all(v >= 0 for v in p["stages_ms_per_img"].values())
    assert ok["baseline"]["ratio_to_baseline"] == 1.0
    assert all(p["reason"] for p in res["pipelines"] if p["status"] == "skipped")
    md = (out / "results.md").read_text()
    assert md.count("\n| ") >= 3 + len(res["pipelines"]) and "vs baseline" in md
    with Image.open(out / "chart.png") as im:
        assert im.format == "PNG" and im.width >= 600
    # the generated dataset is reused on the next run
    stamp = tmp_path / "data" / "bench_8_64x48_s0" / "bench-dataset.json"
    assert stamp.is_file()


def test_bench_rejects_bad_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--images", "0", "--out", str(tmp_path)]) == 1
    assert "--images must be at least 1" in capsys.readouterr().err
