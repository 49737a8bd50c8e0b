"""A latents store through the other commands (issue 45): ``show`` draws its latent channels
(or decodes them with ``--vae``), ``inspect`` says its buckets, dtype, encoders and captions,
``verify`` checks it, ``export-wds`` refuses it in one line; and the example trains from it
with the store's empty prompt taken by ``LatentCaptionDropout(p)``."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data import ShardDataset, cli
from npu_data.latents import empty_prompt
from npu_data.loaders import BucketBatchSampler, DataLoader
from npu_data.transforms import CaptionDropout, LatentCaptionDropout
from tests.support.latents import example_trainer


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    assert all(w in err for w in words), err


def test_show_draws_channels_or_decodes(kohya: tuple[Path, str], models: dict[str, Path],
                                        tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from diffusers import AutoencoderKL

    store = kohya[0]
    ds = ShardDataset(store)
    lat = ds[1]["latents"]
    png = tmp_path / "channels.png"
    assert cli.main(["show", str(store), "--index", "1", "--out", str(png)]) == 0
    assert "latent channels side by side" in capsys.readouterr().out
    c, h, w = lat.shape
    picture = np.asarray(Image.open(png).convert("L"))
    scale = picture.shape[1] // (c * (w + 1) - 1)
    assert scale >= 1 and picture.shape[0] == h * scale + 18  # + the caption band
    first = lat[0].float().numpy()
    want = np.clip((first - first.min()) / (first.max() - first.min()) * 255, 0, 255)
    assert np.abs(picture[:h * scale:scale, :w * scale:scale] - want.astype(np.uint8)
                  ).max() <= 1
    png = tmp_path / "decoded.png"
    assert cli.main(["show", str(store), "--index", "1", "--out", str(png), "--vae",
                     str(models["vae"])]) == 0
    assert "decoded with the VAE" in capsys.readouterr().out
    vae = AutoencoderKL.from_pretrained(models["vae"]).eval()
    with torch.no_grad():
        x = vae.decode(lat[None].float() / vae.config.scaling_factor).sample[0]
    want8 = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
    got = np.asarray(Image.open(png).convert("RGB"))
    step = got.shape[1] // want8.shape[1]
    assert np.array_equal(got[:want8.shape[0] * step:step, ::step][:, :want8.shape[1]], want8)
    other = tmp_path / "other_vae"
    AutoencoderKL(**{**vae.config, "scaling_factor": 0.5}).save_pretrained(other)
    assert cli.main(["show", str(store), "--vae", str(other), "--out", str(png)]) == 1
    _one_line(capsys, "another VAE")


def test_inspect_verify_and_export_of_a_store(kohya: tuple[Path, str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    store = kohya[0]
    ds = ShardDataset(store)
    assert ds.latents is not None
    assert cli.main(["inspect", str(store)]) == 0
    out = capsys.readouterr().out
    assert "4 channels, factor 8, float32, mean, without flipped variant" in out
    listed = " ".join(f"{h}x{w}" for h, w in ds.latents["buckets"])
    assert f"{len(ds.latents['buckets'])} listed: {listed}" in out
    assert "upscaled" in out and "3 of 4 samples" in out
    assert "4 from task data 'description', 0 without (--caption-field description)" in out
    assert "4 stored with the latents, 0 without" in out
    weights = ds.latents["encoders"]["vae"]["weights_sha256"][:12]
    assert "AutoencoderKL config" in out and f"weights {weights}" in out
    assert "text_encoder_2" in out and "12 x 40, pooled 20" in out
    assert cli.main(["inspect", str(store), "--caption-field", "x"]) == 1
    _one_line(capsys, "drop --caption-field")
    assert cli.main(["verify", str(store)]) == 0
    assert cli.main(["export-wds", str(store), "--out", str(tmp_path / "w-%06d.tar")]) == 1
    _one_line(capsys, "latents store", "not images")
    assert not list(tmp_path.glob("w-*"))


def test_latent_caption_dropout_takes_the_stores_empty_prompt(kohya: tuple[Path, str]
                                                              ) -> None:
    ds = ShardDataset(kohya[0])
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 4, ds.latents["buckets"], shuffle=False)
    empty = empty_prompt(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every sample has a caption: nothing to say
        loader = DataLoader(ds, batch_sampler=sampler, transform=LatentCaptionDropout(1.0),
                            device="cpu")
        batches = list(loader)
        list(DataLoader(ds, batch_sampler=sampler, transform=CaptionDropout(0.5),
                        device="cpu"))
    assert batches and all(torch.equal(b["prompt_embeds"][i], empty[0])
                           for b in batches for i in range(len(b["prompt_embeds"])))
    assert all(torch.equal(b["pooled_prompt_embeds"][0], empty[1]) for b in batches)
    from npu_data.errors import UserError

    with pytest.raises(UserError, match="no empty prompt"):  # outside a DataLoader
        LatentCaptionDropout(0.5)(next(iter(DataLoader(ds, batch_sampler=sampler,
                                                        device="cpu"))))


def test_the_example_trains_from_the_encoded_store(kohya: tuple[Path, str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """import -> ``npu-data encode`` (kohya at 256 px, captions from a custom field) ->
    ``examples/train_sdxl_buckets.py --latents``: the UNet gets the store's embeddings."""
    losses = example_trainer().main(["--latents", str(kohya[0]), "--steps", "2", "--batch-size", "2"])
    assert len(losses) == 2 and all(math.isfinite(v) and v > 0 for v in losses)
    said = capsys.readouterr().out
    assert "caption[0] 'photo" in said or "caption[0] ''" in said


def test_a_store_with_samples_without_captions_says_so(store: Path) -> None:
    ds = ShardDataset(store)  # the sample project's last task is unlabeled: no caption
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 3, ds.latents["buckets"])
    with pytest.warns(UserWarning, match=r"captions: 9 stored with the latents, 1 without"):
        DataLoader(ds, batch_sampler=sampler, transform=CaptionDropout(0.1), device="cpu")
