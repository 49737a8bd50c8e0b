"""examples/train_sdxl_buckets.py trains (issue 31): a tiny diffusers UNet with SDXL's
micro-conditioning, for a few steps on the CPU, from the built-in Label Studio sample."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from tests.support.latents import example_trainer


def test_the_sdxl_bucket_example_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    losses = example_trainer().main(["--steps", "3", "--batch-size", "3", "--workdir", str(tmp_path)])
    assert len(losses) == 3 and all(math.isfinite(v) and v > 0 for v in losses)
    out = capsys.readouterr().out
    buckets = {line.split("bucket ")[1].split(",")[0] for line in out.splitlines()
               if line.startswith("step ")}
    assert buckets and all("x" in b for b in buckets)
    assert "time_ids[0] [" in out  # original_size, crop_top_left, target_size reached the UNet
    captions = [line.split("caption[0] ")[1] for line in out.splitlines()
                if line.startswith("step ")]
    assert any(c not in ("''", '""') for c in captions)  # from data.caption, not empty


@pytest.mark.slow
def test_the_example_trains_from_the_latents_cache(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    losses = example_trainer().main(["--cached", "--steps", "3", "--batch-size", "3", "--workdir",
                              str(tmp_path)])
    assert len(losses) == 3 and all(math.isfinite(v) and v > 0 for v in losses)
    assert (tmp_path / "latents" / "manifest.json").is_file()
    assert "time_ids[0] [" in capsys.readouterr().out


@pytest.mark.slow
def test_one_step_from_the_cache_equals_one_from_pixels(tmp_path: Path) -> None:
    """The same samples, models, noise and timesteps: the loss from stored latents is the
    loss from the VAE on the centre-cropped pixels (1e-5, CPU, float32)."""
    from diffusers import DDPMScheduler
    from torch.utils.data import default_collate

    from npu_data.buckets import make_buckets
    from npu_data.loaders import LabelStudioDataset, collate_samples
    from npu_data.shards.reader import ShardDataset
    from npu_data.transforms import Compose, Normalize, ResizeCrop

    ex = example_trainer()
    dataset = LabelStudioDataset(ex.sample_export(tmp_path), cache_dir=tmp_path / "cache")
    buckets = make_buckets(64, step=16, min_side=32)  # as the example
    vae, unet, text = ex.build_models(0)
    cache = ex.encode_cache(dataset, vae, buckets, tmp_path / "latents")
    sizes = cache.sizes()
    ids = [i for i in range(len(cache)) if (sizes[i] == sizes[0]).all()][:3]
    assert len(ids) == 3
    stored = default_collate([cache[i] for i in ids])
    src = ShardDataset(dataset.path)
    pixels = Compose([ResizeCrop(None, buckets=buckets), Normalize(0.5, 0.5)])(
        collate_samples(src.__getitems__(ids)))
    for key in ("original_size", "crop_top_left", "target_size"):
        assert torch.equal(stored[key], pixels[key]), key
    assert stored["caption"] == pixels["caption"]
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    losses = []
    for batch in (stored, pixels):
        latents = ex.batch_latents(batch, vae)
        gen = torch.Generator().manual_seed(7)
        losses.append(ex.step_loss(copy.deepcopy(unet), copy.deepcopy(text), scheduler,
                                   latents, batch, gen).item())
    assert (ex.batch_latents(stored, vae) - ex.batch_latents(pixels, vae)).abs().max() <= 1e-5
    assert abs(losses[0] - losses[1]) <= 1e-5 and losses[0] > 0
