"""npu_data/bench/sdxl_vae.py (``npu-data bench sdxl-vae``): its arguments are checked in one
line, and a run at the quick sizes reports both rates, the spread and the bytes per sample
of a store holding SDXL-sized text embeddings; no timing is asserted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from npu_data import cli
from npu_data.bench import sdxl_vae


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--images", "0"], ["--size", "100"], ["--runs", "0"]):
        assert cli.main(["bench", "sdxl-vae", *bad]) == 1, bad
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: bench sdxl-vae:") and "\n" not in err, err


def test_the_sdxl_vae_bench_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sdxl_vae.main(["--quick", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"pixels: JPEG shards.* median +[\d.e+-]+ samples/s \([\d.e+-]+-", out), out
    assert re.search(r"store: latents \+ embeddings 77x2048 .* median +[\d.e+-]+ samples/s",
                     out), out
    assert re.search(r"store [\d.]+ kB", out), out
    store = next(tmp_path.rglob("latents_cpu/manifest.json")).parent
    from npu_data import ShardDataset

    ds = ShardDataset(store)
    assert ds.latents is not None and ds.latents["text"] == {"tokens": 77, "dim": 2048,
                                                             "pooled": 1280}
    assert ds.latents["encoders"]["vae"]["class"] == "AutoencoderKL"
