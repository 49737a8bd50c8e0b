"""``npu-data encode``: what it prints, and its mistakes as one line naming the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_data import ShardDataset, cli


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_encode_writes_a_store_and_says_what(pixels: Path, models: dict[str, Path],
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "store"
    assert cli.main(["encode", str(pixels), "--vae", str(models["vae"]), "--out", str(out),
                     "--buckets", "64x64,48x80,80x48", "--device", "cpu", "--no-flip",
                     "--dtype", "bf16"]) == 0
    said = capsys.readouterr().out
    assert f"{out}: 10 samples, 1 shard(s)" in said and "kB per sample" in said
    ds = ShardDataset(out)
    assert ds.latents is not None and ds.latents["flip"] is False
    assert ds.latents["dtype"] == "bfloat16" and "latents_flipped" not in ds[0]
    assert cli.main(["verify", str(out)]) == 0


def test_encode_mistakes_are_one_line(pixels: Path, models: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = ["encode", str(pixels), "--vae", str(models["vae"]), "--out", str(tmp_path / "o"),
            "--device", "cpu"]
    assert cli.main([*base, "--text-encoder", str(models["text_encoder"])]) == 1
    assert "needs its --tokenizer" in _error(capsys)
    assert cli.main([*base, "--buckets", "64x"]) == 1
    assert "--buckets: '64x' is not 'sdxl', 'kohya[:SIZE]' or a list" in _error(capsys)
    assert cli.main([*base, "--batch-size", "0"]) == 1
    assert "--batch-size: must be a positive integer" in _error(capsys)
    assert cli.main([*base, "--buckets", "60x60"]) == 1
    assert "--buckets: [60, 60] is not a multiple of the VAE's factor 8" in _error(capsys)
    assert not (tmp_path / "o").exists()  # nothing written for a mistake
