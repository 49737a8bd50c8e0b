"""What a resumed encode may touch (issue 44): only a folder npu-data wrote — a stranger's
folder is refused and left byte for byte; and only with the encoders (weights, not only
configs) and the CPU thread count the kept shards were made with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from npu_data import cli
from npu_data.errors import UserError
from npu_data.latents import encode_latents
from npu_data.shards.verify import verify_dataset
from tests.support.latents import encode_kwargs


def _files(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under ``root``."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    for w in words:
        assert w in err, err
    return err


def _stranger(root: Path, manifest: bytes = b"my notes, not JSON") -> Path:
    root.mkdir(parents=True)
    (root / "manifest.json").write_bytes(manifest)
    (root / "shard-00000").mkdir()
    (root / "shard-00000" / "notes.txt").write_text("keep me")
    (root / "unrelated.txt").write_text("mine")
    (root / ".shard-00001.tmp-1").mkdir()  # named like a temporary shard, yet not ours
    (root / ".shard-00001.tmp-1" / "draft.txt").write_text("mine too")
    return root


def test_resume_into_a_folder_no_encode_wrote_changes_nothing(
        pixels: Path, models: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--vae", str(models["vae"]), "--buckets", "64x64,48x80,80x48", "--device", "cpu",
            "--no-flip", "--resume"]
    cases = {"garbage manifest": (_stranger(tmp_path / "a"), "manifest.json"),
             "JSON of another tool": (_stranger(tmp_path / "b", b'{"format": "other"}'),
                                      "manifest.json"),
             "a shard folder only": (tmp_path / "c", "shard-00000"),
             "an unrelated file only": (tmp_path / "d", "no import or encode")}
    (tmp_path / "c" / "shard-00000").mkdir(parents=True)
    (tmp_path / "c" / "shard-00000" / "notes.txt").write_text("keep me")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "todo.txt").write_text("mine")
    for why, (out, named) in cases.items():
        before = _files(out)
        assert cli.main(["encode", str(pixels), "--out", str(out), *base]) == 1, why
        _one_line(capsys, named, "nothing was changed")
        assert _files(out) == before, why
    # an import's --resume follows the same rule (shards.writer.prepare_out)
    from npu_data.tools.sample_data import make_sample_project

    export = make_sample_project(tmp_path / "p", n_images=2, width=32, height=32).export_path
    out = tmp_path / "a"
    before = _files(out)
    assert cli.main(["import", str(export), "--out", str(out), "--resume"]) == 1
    _one_line(capsys, "manifest.json", "not a manifest npu-data wrote")
    assert _files(out) == before


def test_a_killed_encode_of_ours_still_resumes(pixels: Path, models: dict[str, Path],
                                               tmp_path: Path) -> None:
    """The owner record is written first: a folder holding only it and a temporary shard
    (killed in the first shard) resumes; a stray shard folder in it is refused."""
    kw = encode_kwargs(models, text_encoders=None, tokenizers=None, flip=False)
    out = tmp_path / "s"
    encode_latents(pixels, out, models["vae"], **kw)
    whole = _files(out)
    for p in sorted(out.glob("shard-*"), reverse=True):
        for f in p.iterdir():
            f.unlink()
        p.rmdir()
    (out / "manifest.json").unlink()
    (out / ".shard-00000.tmp-99").mkdir()  # what a kill in the first shard leaves
    encode_latents(pixels, out, models["vae"], **kw, resume=True)
    assert _files(out) == whole
    (out / "shard-00009").mkdir()  # not written by the encode: refused, kept
    with pytest.raises(UserError, match="shard-00009: not a shard npu-data completed"):
        encode_latents(pixels, out, models["vae"], **kw, resume=True)
    assert (out / "shard-00009").is_dir() and verify_dataset(out) == []


def test_resume_with_other_weights_or_threads_is_refused(
        pixels: Path, models: dict[str, Path], tmp_path: Path) -> None:
    """Another VAE or text encoder of the same config (other weights) and another CPU
    thread count are refused in one line before anything is deleted."""
    from diffusers import AutoencoderKL
    from transformers import CLIPTextModel

    from npu_data.latents.weights import weights_sha256

    kw = encode_kwargs(models, flip=False)
    out = tmp_path / "s"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ds = encode_latents(pixels, out, models["vae"], **kw)
        (out / "manifest.json").unlink()  # as a killed encode leaves it
        before = _files(out)
        vae = AutoencoderKL.from_pretrained(models["vae"])
        assert ds.latents is not None
        assert ds.latents["encoders"]["vae"]["weights_sha256"] == weights_sha256(vae)
        with torch.no_grad():
            vae.encoder.conv_in.weight.mul_(1.5)  # the same config, other weights
        with pytest.raises(UserError, match=r"encoded with another VAE \(weights_sha256") \
                as exc:
            encode_latents(pixels, out, vae, **kw, resume=True)
        assert "\n" not in str(exc.value) and "nothing was changed" in str(exc.value)
        text = CLIPTextModel.from_pretrained(models["text_encoder"])
        with torch.no_grad():
            next(t for n, t in text.named_parameters() if n.endswith("bias")).add_(0.25)
        with pytest.raises(UserError, match=r"another text encoder \(weights_sha256"):
            encode_latents(pixels, out, models["vae"],
                           **{**kw, "text_encoders": [text, models["text_encoder_2"]]},
                           resume=True)
        torch.set_num_threads(2)
        with pytest.raises(UserError, match="encoded with 1 CPU thread.*OMP_NUM_THREADS=1"):
            encode_latents(pixels, out, models["vae"], **kw, resume=True)
        assert _files(out) == before
        torch.set_num_threads(1)
        encode_latents(pixels, out, models["vae"], **kw, resume=True)
        assert verify_dataset(out) == []
    finally:
        torch.set_num_threads(threads)
