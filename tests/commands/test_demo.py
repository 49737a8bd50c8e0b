"""`npu-data demo` end to end on a tiny sample: import, inspect, stream, preview.png."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data.cli import main


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--images", "4", "--batch-size", "4",
               "--workers", "0", "--epochs", "1", "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "imported 4 of 4 tasks" in text and "samples                4" in text
    assert "device: cpu" in text and "img/s" in text and "ratio" in text
    with Image.open(out / "preview.png") as im:
        assert im.width > 4 * 224 and im.height > 224
        pixels = np.asarray(im.convert("RGB"))
    assert pixels.std() > 20  # pictures drawn, not a blank canvas
    with Image.open(out / "preview-geometry.png") as im:  # a row per geometric transform
        assert im.width > 4 * 224 and im.height > 6 * 224
        assert np.asarray(im.convert("RGB")).std() > 20
    assert "7. the geometric transforms" in text
    assert (out / "project" / "export.json").is_file()


def test_demo_refuses_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path), "--images", "0"]) == 1
    assert capsys.readouterr().err.startswith("error: demo:")
