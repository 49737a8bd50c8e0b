"""``npu-data encode`` as an SDXL fine-tuner runs it (issue 45): captions by the pixel path's
rule (``--caption-field``, the line saying where they came from, a dataset without captions
refused unless ``--unconditional``), kohya's buckets at a size with ``--no-upscale`` and the
line on upscaling, and a sampler over the store held to the store's buckets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from npu_data import ShardDataset, cli
from npu_data.buckets import buckets_of
from npu_data.errors import UserError
from npu_data.latents import empty_prompt
from npu_data.loaders import BucketBatchSampler
from tests.support.latents import DESCRIBED, encode_args


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def _embeds(models: dict[str, Path], prompts: list[str]) -> torch.Tensor:
    from npu_data.latents.models import encode_prompts, load_models

    m = load_models(models["vae"], [models["text_encoder"], models["text_encoder_2"]],
                    [models["tokenizer"], models["tokenizer_2"]], torch.device("cpu"))
    return encode_prompts(m, prompts)[0]


def test_captions_come_from_the_named_field(kohya: tuple[Path, str],
                                            models: dict[str, Path]) -> None:
    out, said = kohya
    assert "captions: 4 from task data 'description', 0 without (--caption-field " \
           "description)" in said
    ds = ShardDataset(out)
    captions = [ds[i]["caption"] for i in range(len(ds))]
    assert captions == [f"photo {c} of a cat" for c in "abcd"]
    want = _embeds(models, captions)
    got = torch.stack([ds[i]["prompt_embeds"] for i in range(len(ds))])
    assert (got - want).abs().max().item() <= 1e-5
    assert not torch.allclose(got[0], empty_prompt(ds)[0])
    assert ds.latents is not None and ds.latents["captions"]["field"] == "description"


def test_no_caption_is_refused_unless_unconditional(described: Path, models: dict[str, Path],
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "store"
    base = [*encode_args(described, models, out), "--buckets", "64x64"]
    assert cli.main(base) == 1
    err = _one_line(capsys)
    assert "no sample has a caption" in err and "--caption-field" in err
    assert "--unconditional" in err and not out.exists()  # refused before anything is made
    assert cli.main([*base, "--caption-field", "title"]) == 1  # a field nobody filled
    assert "no task data 'title'" in _one_line(capsys)
    assert cli.main([*base, "--unconditional"]) == 0
    assert "every sample encoded with the empty prompt" in capsys.readouterr().out
    ds = ShardDataset(out)
    empty = empty_prompt(ds)[0]
    assert all(ds[i]["caption"] == "" and torch.equal(ds[i]["prompt_embeds"], empty)
               for i in range(len(ds)))


def test_kohya_buckets_at_a_size_and_the_upscale_line(kohya: tuple[Path, str],
                                                      described: Path, models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    out, said = kohya
    ds = ShardDataset(out)
    assert ds.latents is not None
    assert ds.latents["buckets"] == [list(b) for b in buckets_of("kohya", 256).sizes]
    original = np.asarray(DESCRIBED, np.int64)
    targets = np.stack([ds[i]["target_size"] for i in range(len(ds))])
    cover = (targets / original).max(axis=1)
    assert (cover > 1).sum() == 3  # the 256 x 256 photo covers its bucket exactly
    assert f"upscaled: 3 of 4 samples to cover their bucket, by {cover[cover > 1].min():.2f}x " \
           f"to {cover.max():.2f}x" in said and "--no-upscale" in said
    small = tmp_path / "small"
    capture = tmp_path / "said"
    import contextlib

    with open(capture, "w") as fh, contextlib.redirect_stdout(fh):
        assert cli.main([*encode_args(described, models, small), "--buckets", "kohya:256",
                         "--no-upscale", "--unconditional"]) == 0
    assert "upscaled: none of 4 samples" in capture.read_text()
    kept = ShardDataset(small)
    sizes = np.stack([kept[i]["target_size"] for i in range(len(kept))])
    assert (sizes <= original).all() and (sizes % 64 == 0).all()
    assert kept.latents is not None and kept.latents["no_upscale"] is True


def test_a_sampler_over_the_store_takes_its_buckets_only(kohya: tuple[Path, str]) -> None:
    ds = ShardDataset(kohya[0])
    with pytest.raises(UserError, match=r"encoded for buckets \[\[.*\]\], not 'sdxl'") as exc:
        BucketBatchSampler(ds, 2, "sdxl")
    assert "\n" not in str(exc.value) and "dataset.latents['buckets']" in str(exc.value)
    assert ds.latents is not None
    for given in (buckets_of("kohya", 256), ds.latents["buckets"]):
        sampler = BucketBatchSampler(ds, 2, given, shuffle=False)
        for batch in sampler:
            assert len({tuple(ds[i]["latents"].shape) for i in batch}) == 1


def test_bucket_flags_are_checked(described: Path, models: dict[str, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    base = encode_args(described, models, tmp_path / "o")
    for bad in ("kohya:", "kohya:0", "kohya:x", "sdx"):
        assert cli.main([*base, "--buckets", bad]) == 1, bad
        assert "--buckets" in _one_line(capsys)
    assert not (tmp_path / "o").exists()
