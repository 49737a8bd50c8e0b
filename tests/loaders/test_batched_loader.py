"""DataLoader over ShardDataset: the batched read is the default and changes nothing visible."""

from __future__ import annotations

from typing import Any

import psutil
import pytest
import torch

from npu_data.annotations.images import ImageOptions
from npu_data.loaders import DataLoader, collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.compare import same_batch
from tests.support.exports import make_export


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    tmp = tmp_path_factory.mktemp("batched_loader")
    export = make_export(tmp / "proj", n=40)
    opts = WriteOptions(images=ImageOptions(images_root=tmp / "proj"), shard_size=7)
    write_dataset(export, tmp / "ds", opts)
    return ShardDataset(tmp / "ds")


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_batches_equal_per_sample_collate(shards: ShardDataset, workers: int) -> None:
    loader = DataLoader(shards, batch_size=6, shuffle=True, seed=4, num_workers=workers,
                        device="cpu")
    seen = []
    for batch in loader:
        idx = batch["index"].tolist()
        same_batch(collate_samples([shards[i] for i in idx]), batch)
        seen += idx
    assert sorted(seen) == list(range(len(shards))) and seen != sorted(seen)


class _Recorder:
    """A user collate_fn: records what it was given, returns the indices."""

    def __call__(self, samples: Any) -> torch.Tensor:
        assert type(samples) is list and all(type(s) is dict for s in samples)
        return torch.tensor([s["index"] for s in samples])


@pytest.mark.parametrize("workers", [0, 1])
def test_user_collate_fn_gets_the_list_of_sample_dicts(shards: ShardDataset,
                                                       workers: int) -> None:
    loader = DataLoader(shards, batch_size=5, collate_fn=_Recorder(), num_workers=workers,
                        device="cpu")
    assert torch.cat(list(loader)).tolist() == list(range(len(shards)))


@pytest.mark.slow
@pytest.mark.parametrize("crop", [False, True])
def test_worker_private_memory_stays_flat(shards: ShardDataset, crop: bool) -> None:
    from npu_data.transforms import ColorJitter, Compose, RandomResizedCrop

    transform = Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1)])
    loader = DataLoader(shards, batch_size=4, num_workers=2, device="cpu", shuffle=True,
                        persistent_workers=True, transform=transform if crop else None)
    uss: dict[int, list[int]] = {}
    others = {child.pid for child in psutil.Process().children()}  # not this loader's workers
    for epoch in range(30):
        for i, _ in enumerate(loader):
            if epoch in (2, 29) and i == 0:
                for child in psutil.Process().children():
                    if child.pid not in others:
                        uss.setdefault(child.pid, []).append(child.memory_full_info().uss)
    assert len(uss) == 2
    for series in uss.values():
        assert series[-1] - series[0] < 8 << 20, series
