"""examples/train_sdxl_buckets.py trains (issue 31): a tiny diffusers UNet with SDXL's
micro-conditioning, for a few steps on the CPU, from the built-in Label Studio sample."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_sdxl_buckets.py"


def test_the_sdxl_bucket_example_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    spec = importlib.util.spec_from_file_location("train_sdxl_buckets", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    losses = module.main(["--steps", "3", "--batch-size", "3", "--workdir", str(tmp_path)])
    assert len(losses) == 3 and all(math.isfinite(v) and v > 0 for v in losses)
    out = capsys.readouterr().out
    buckets = {line.split("bucket ")[1].split(",")[0] for line in out.splitlines()
               if line.startswith("step ")}
    assert buckets and all("x" in b for b in buckets)
    assert "time_ids[0] [" in out  # original_size, crop_top_left, target_size reached the UNet
    captions = [line.split("caption[0] ")[1] for line in out.splitlines()
                if line.startswith("step ")]
    assert any(c not in ("''", '""') for c in captions)  # from data.caption, not empty
