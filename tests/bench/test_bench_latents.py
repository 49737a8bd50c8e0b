"""npu_data/bench/latents_cache.py runs at tiny sizes and reports both rates and the bytes
per sample; no timing is asserted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from npu_data.bench import latents_cache

pytestmark = pytest.mark.slow  # encodes a latents store, then runs the bench over it


def test_the_latents_bench_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert latents_cache.main(["--quick", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"pixels: .* median +[\d.]+ samples/s", out), out
    assert re.search(r"cache: .* median +[\d.]+ samples/s", out), out
    assert re.search(r"latents store [\d.]+ kB", out), out
    assert list(tmp_path.rglob("latents_tiny_cpu/manifest.json"))
