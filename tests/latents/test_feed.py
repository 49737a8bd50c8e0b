"""Feeding a latents store (issue 38): ``ShardDataset`` + ``BucketBatchSampler`` + the
``DataLoader`` give batches of one bucket; ``RandomLatentFlip`` and ``LatentCaptionDropout``
pick each sample's stored variant and the empty prompt, keyed by (seed, epoch, sample); a
mid-epoch resume continues with the same batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from npu_data import BucketBatchSampler, DataLoader, ShardDataset
from npu_data.errors import UserError
from npu_data.latents import empty_prompt
from npu_data.transforms import Compose, LatentCaptionDropout, RandomLatentFlip, draws
from tests.support.latents import resumed_after_one


def _loader(ds: ShardDataset, seed: int = 3, workers: int = 0) -> DataLoader:
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 3, [tuple(b) for b in ds.latents["buckets"]], seed=seed)
    pipeline = Compose([RandomLatentFlip(0.5), LatentCaptionDropout(0.5, empty_prompt(ds))])
    return DataLoader(ds, batch_sampler=sampler, transform=pipeline, device="cpu", seed=seed,
                      num_workers=workers, pin_memory=True)


def _batches(loader: DataLoader) -> list[dict[str, Any]]:
    return list(loader)


def test_batches_hold_one_bucket_and_the_drawn_variants(store: Path) -> None:
    ds = ShardDataset(store)
    empty_embeds, empty_pooled = empty_prompt(ds)
    batches = _batches(_loader(ds))
    seen: list[int] = []
    flips = drops = 0
    for b in batches:
        lat = b["latents"]
        h, w = (int(v) for v in b["target_size"][0])
        assert lat.dtype == torch.float32 and lat.shape[1:] == (4, h // 8, w // 8)
        assert (b["target_size"] == b["target_size"][0]).all()  # one bucket per batch
        assert "latents_flipped" not in b and "crop_top_left_flipped" not in b
        ids = b["index"].tolist()
        seen += ids
        pipeline = _loader(ds).transform
        assert isinstance(pipeline, Compose)
        keyed = pipeline.draw_keyed(b["sizes"].numpy(), draws.sample_keys(3, 0, ids))
        assert torch.equal(b["aug"]["0.flip"], keyed["0.flip"])
        assert torch.equal(b["aug"]["1.drop"], keyed["1.drop"])
        for t, i in enumerate(ids):
            s = ds[i]
            flip, drop = bool(b["aug"]["0.flip"][t]), bool(b["aug"]["1.drop"][t])
            flips += flip
            drops += drop
            want = s["latents_flipped"] if flip else s["latents"]
            assert torch.equal(lat[t], want)
            tl = s["crop_top_left_flipped"] if flip else s["crop_top_left"]
            assert b["crop_top_left"][t].tolist() == tl.tolist()
            assert b["original_size"][t].tolist() == s["original_size"].tolist()
            embeds = empty_embeds if drop else s["prompt_embeds"]
            pooled = empty_pooled if drop else s["pooled_prompt_embeds"]
            assert torch.equal(b["prompt_embeds"][t], embeds)
            assert torch.equal(b["pooled_prompt_embeds"][t], pooled)
            assert b["caption"][t] == ("" if drop else s["caption"])
    assert set(seen) == set(range(len(ds)))  # (the sampler's last-batch rule may repeat)
    assert 0 < flips < len(seen) and 0 < drops < len(seen)


def test_mid_epoch_resume_continues_with_the_same_batches(store: Path) -> None:
    ds = ShardDataset(store)
    whole = _batches(_loader(ds))
    rest = resumed_after_one(lambda: _loader(ds))
    assert len(rest) == len(whole) - 1
    for a, b in zip(rest, whole[1:], strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["latents"], b["latents"])
        assert torch.equal(a["prompt_embeds"], b["prompt_embeds"])


def test_worker_processes_give_the_same_batches(store: Path) -> None:
    ds = ShardDataset(store)
    here, workers = _batches(_loader(ds)), _batches(_loader(ds, workers=2))
    assert len(here) == len(workers)
    for a, b in zip(here, workers, strict=True):
        assert torch.equal(a["latents"], b["latents"]) and a["caption"] == b["caption"]
        assert torch.equal(a["pooled_prompt_embeds"], b["pooled_prompt_embeds"])


def test_a_store_without_what_a_transform_needs_is_one_line() -> None:
    batch = {"latents": torch.zeros(2, 4, 2, 2), "sizes": torch.full((2, 2), 16)}
    with pytest.raises(UserError, match="encoded with flip=False"):
        RandomLatentFlip(1.0)(batch)
    half = {**batch, "latents_flipped": torch.zeros(2, 4, 2, 2),
            "crop_top_left": torch.zeros(2, 2, dtype=torch.int64)}
    with pytest.raises(UserError, match="'latents_flipped' but no 'crop_top_left_flipped'"):
        RandomLatentFlip(1.0)(half)
    with pytest.raises(UserError, match="encoded without text encoders"):
        LatentCaptionDropout(1.0, (torch.zeros(3, 5), torch.zeros(4)))(batch)
    from npu_data.transforms import ColorJitter

    with pytest.raises(UserError, match="a latents batch takes only the latent transforms"):
        ColorJitter(brightness=0.2)(batch)
    with pytest.raises(UserError, match="empty must be the empty prompt's two tensors"):
        LatentCaptionDropout(0.1, (torch.zeros(3, 5),))  # type: ignore[arg-type]
    text = {**batch, "prompt_embeds": torch.zeros(2, 3, 5),
            "pooled_prompt_embeds": torch.zeros(2, 4)}
    with pytest.raises(UserError, match="no empty prompt — use it in npu_data's DataLoader"):
        LatentCaptionDropout(0.1)(text)  # None: the DataLoader gives the store's


@pytest.mark.newest_torch
def test_the_latent_transforms_compile_whole() -> None:
    """``torch.compile(fullgraph=True)`` captures RandomLatentFlip + LatentCaptionDropout on
    host-drawn parameters as one graph (no host sync), with the eager result."""
    import torch._dynamo

    gen = torch.Generator().manual_seed(0)
    b = 4
    batch = {"latents": torch.randn(b, 4, 3, 5, generator=gen),
             "latents_flipped": torch.randn(b, 4, 3, 5, generator=gen),
             "crop_top_left": torch.zeros(b, 2, dtype=torch.int64),
             "crop_top_left_flipped": torch.ones(b, 2, dtype=torch.int64),
             "prompt_embeds": torch.randn(b, 6, 8, generator=gen),
             "pooled_prompt_embeds": torch.randn(b, 7, generator=gen),
             "sizes": torch.full((b, 2), 24), "index": torch.arange(b)}
    empty = (torch.zeros(6, 8), torch.zeros(7))
    t = Compose([RandomLatentFlip(0.5), LatentCaptionDropout(0.5, empty)])
    params = t.draw_keyed(batch["sizes"].numpy(), draws.sample_keys(1, 0, list(range(b))))

    def fn(x: dict[str, torch.Tensor], p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        out = t.apply(x, p)
        return out["latents"], out["crop_top_left"], out["prompt_embeds"]

    torch._dynamo.reset()
    try:
        expected = fn(batch, params)
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(batch, params)
    finally:
        torch._dynamo.reset()
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e, g)
    assert not torch.equal(expected[0], batch["latents"])  # some flipped


def test_a_latents_store_batched_across_buckets_names_the_bucket_sampler(store: Path) -> None:
    ds = ShardDataset(store)
    loader = DataLoader(ds, batch_size=len(ds), device="cpu", seed=0)  # every bucket at once
    with pytest.raises(UserError, match="key 'latents'.*BucketBatchSampler") as err:
        next(iter(loader))
    assert "\n" not in str(err.value)
