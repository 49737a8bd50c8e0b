"""BucketBatchSampler (issue 31): bucket choice, one bucket per batch, even ranks, resume,
and the sampler under torch's DataLoader and ours with ResizeCrop(size=None)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from loaders_fakes import photo_dataset

import npu_data
from npu_data.buckets import SDXL, assign, bucket_list
from npu_data.errors import UserError
from npu_data.loaders import BucketBatchSampler, DataLoader, LabelStudioDataset
from npu_data.transforms import CaptionDropout, Compose, Normalize, RandomHorizontalFlip, ResizeCrop


def _sizes(n: int = 103, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(300, 2000, n), rng.integers(300, 2000, n)], axis=1)


def test_each_sample_goes_to_the_bucket_of_closest_log_aspect() -> None:
    sizes = np.array([[1200, 1600], [1600, 1200], [1000, 1000], [500, 2000], [2000, 500],
                      [768, 1344], [100, 130]])
    got = assign(sizes, SDXL)
    ratios = np.log(sizes[:, 0] / sizes[:, 1])
    want = [int(np.argmin([abs(r - np.log(h / w)) for h, w in SDXL])) for r in ratios]
    assert got.tolist() == want
    assert [SDXL[i] for i in got[:6]] == [(896, 1152), (1152, 896), (1024, 1024), (640, 1536),
                                           (1536, 640), (768, 1344)]
    # a tie goes to the first listed: 2:3 lies as far from 1:1 as from 4:9 in log ratio
    assert assign(np.array([[2, 3]]), [(4, 9), (1, 1)]).tolist() == [0]
    assert assign(np.array([[2, 3]]), [(1, 1), (4, 9)]).tolist() == [0]


def test_presets_scale_and_bad_lists_are_refused() -> None:
    assert bucket_list("sdxl") == SDXL
    half = bucket_list("sdxl", size=512)
    assert half[0] == (512, 512) and all(h % 64 == 0 and w % 64 == 0 for h, w in half)
    for bad in ("sd9", [], [(0, 10)], [(1.5, 2)], "x"):
        with pytest.raises(UserError):
            bucket_list(bad)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="sizes"):
        BucketBatchSampler(object(), 4, "sdxl")
    with pytest.raises(UserError):
        BucketBatchSampler(_sizes(), 0, "sdxl")


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_one_bucket_per_batch_equal_batches_per_rank_every_sample(world: int,
                                                                  drop_last: bool) -> None:
    sizes = _sizes()
    samplers = [BucketBatchSampler(sizes, 6, "sdxl", num_replicas=world, rank=r, seed=4,
                                   drop_last=drop_last) for r in range(world)]
    per_rank = [list(s) for s in samplers]
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1 and counts == {len(samplers[0])}  # DDP needs the same count
    bucket_of = assign(sizes, SDXL)
    seen: list[int] = []
    short = {b: 0 for b in set(bucket_of.tolist())}
    for batches in per_rank:
        for batch in batches:
            assert 0 < len(batch) <= 6 and len(set(batch)) == len(batch)  # no sample twice
            assert len(set(bucket_of[batch].tolist())) == 1  # one bucket per batch
            assert len(batch) == 6 or not drop_last
            short[int(bucket_of[batch[0]])] += len(batch) < 6
            seen += batch
    if drop_last:
        assert len(seen) == len(set(seen))  # nothing repeats
    else:
        assert set(seen) == set(range(len(sizes)))  # every sample at least once
        # a bucket's last batch is trained short; repeats are only whole padding batches
        assert len(seen) - len(sizes) < world * 6
        expect_short = {b: int((bucket_of == b).sum() % 6 != 0) for b in short}
        assert all(short[b] >= expect_short[b] for b in short)


def test_deterministic_in_seed_and_epoch() -> None:
    s = BucketBatchSampler(_sizes(), 4, "sdxl", num_replicas=1, rank=0, seed=1)
    a = list(s)
    assert list(s) == a  # same epoch, same order (as torch's DistributedSampler)
    s.set_epoch(1)
    b = list(s)
    assert b != a and sorted(map(tuple, b)) != sorted(map(tuple, a))
    t = BucketBatchSampler(_sizes(), 4, "sdxl", num_replicas=1, rank=0, seed=1)
    t.set_epoch(1)
    assert list(t) == b
    plain = BucketBatchSampler(_sizes(), 4, "sdxl", num_replicas=1, rank=0, shuffle=False)
    first = list(plain)[0]
    assert first == sorted(first)


@pytest.mark.parametrize(("world", "new_world"), [(2, 2), (3, 3), (4, 2), (2, 3)])
def test_mid_epoch_resume(world: int, new_world: int) -> None:
    sizes = _sizes(200)
    full = [list(BucketBatchSampler(sizes, 5, "sdxl", num_replicas=world, rank=r, seed=7))
            for r in range(world)]
    states = []
    for r in range(world):  # every rank consumed 3 batches, then a checkpoint
        s = BucketBatchSampler(sizes, 5, "sdxl", num_replicas=world, rank=r, seed=7)
        it = iter(s)
        for _ in range(3):
            next(it)
        states.append(json.loads(json.dumps(s.state_dict())))  # plain data
    assert len({json.dumps(st, sort_keys=True) for st in states}) == 1
    rest = []
    for r in range(new_world):
        s = BucketBatchSampler(sizes, 5, "sdxl", num_replicas=new_world, rank=r, seed=0)
        s.load_state_dict(states[0])
        rest.append(list(s))
        assert len(s) == len(full[0]) * world // new_world or new_world != world
    assert len({len(r) for r in rest}) == 1
    if new_world == world:
        assert rest == [b[3:] for b in full]  # exactly the rest of the epoch
    seen = {i for b in full for batch in b[:3] for i in batch}
    seen |= {i for b in rest for batch in b for i in batch}
    assert seen == set(range(len(sizes)))  # nothing lost
    # a resume serves one pass: the next pass is the whole epoch again
    s = BucketBatchSampler(sizes, 5, "sdxl", num_replicas=world, rank=0, seed=0)
    s.load_state_dict(states[0])
    list(s)
    assert list(s) == full[0]


def test_resume_after_an_elastic_resume() -> None:
    sizes = _sizes(150)
    s = BucketBatchSampler(sizes, 4, "sdxl", num_replicas=4, rank=0, seed=2)
    it = iter(s)
    next(it)
    state = s.state_dict()  # 4 global batches consumed, world 4
    two = [BucketBatchSampler(sizes, 4, "sdxl", num_replicas=2, rank=r) for r in range(2)]
    for t in two:
        t.load_state_dict(state)
    whole = [list(t) for t in two]
    again = []
    for t in two:  # each of the 2 ranks consumed 2 batches, saved, resumed on 2 ranks
        t.load_state_dict(state)
        it2 = iter(t)
        next(it2)
        next(it2)
        again.append(t.state_dict())
    for r, t in enumerate(two):
        t.load_state_dict(again[0])
        assert list(t) == whole[r][2:]


def test_state_is_checked_against_the_sampler() -> None:
    s = BucketBatchSampler(_sizes(), 4, "sdxl", num_replicas=1, rank=0)
    state = s.state_dict()
    with pytest.raises(UserError, match="batch_size"):
        BucketBatchSampler(_sizes(), 8, "sdxl", num_replicas=1, rank=0).load_state_dict(state)
    with pytest.raises(UserError, match="dataset_len"):
        BucketBatchSampler(_sizes(50), 4, "sdxl", num_replicas=1, rank=0).load_state_dict(state)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> LabelStudioDataset:
    return photo_dataset(tmp_path_factory.mktemp("aigc"), 14, 160, 96)


BUCKETS = [(64, 64), (48, 80), (80, 48)]


def test_torch_dataloader_takes_it_as_batch_sampler(photos: LabelStudioDataset) -> None:
    sampler = BucketBatchSampler(photos, 3, BUCKETS, num_replicas=1, rank=0, seed=5)
    loader = torch.utils.data.DataLoader(photos, batch_sampler=sampler,
                                         collate_fn=npu_data.collate_samples)
    assert len(loader) == len(sampler)
    buckets = sampler.bucket_sizes()
    for batch, indices in zip(loader, list(sampler), strict=True):
        assert batch["index"].tolist() == indices
        assert len({tuple(b) for b in buckets[indices].tolist()}) == 1


def test_our_dataloader_with_buckets_and_resize_crop(photos: LabelStudioDataset) -> None:
    sampler = BucketBatchSampler(photos, 3, BUCKETS, num_replicas=1, rank=0, seed=5)
    pipe = Compose([ResizeCrop(None, crop="random", buckets=BUCKETS), RandomHorizontalFlip(),
                    CaptionDropout(0.5), Normalize(0.5, 0.5, dtype=torch.bfloat16)])
    loader = DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pipe, seed=5)
    shapes = set()
    sizes = photos.sizes()
    for batch in loader:
        image = batch["image"]
        assert image.dtype == torch.bfloat16 and float(image.min()) >= -1.0
        target = tuple(image.shape[2:])
        shapes.add(target)
        idx = batch["index"].numpy()
        assert batch["original_size"].tolist() == sizes[idx].tolist()
        assert batch["target_size"].tolist() == [list(target)] * len(idx)
        assert batch["crop_top_left"].dtype == torch.int64
        assert all(c in ("", photos[int(i)]["caption"]) for c, i in zip(batch["caption"], idx,
                                                                         strict=True))
    assert shapes == {tuple(b) for b in sampler.bucket_sizes().tolist()}
    # the same batches with crop at read off: the reader's ResizeCrop is the transform's
    on = DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pipe, seed=5)
    off = DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pipe, seed=5,
                     read_crop=False)
    for a, b in zip(on, off, strict=True):
        assert torch.equal(a["image"], b["image"])
        assert torch.equal(a["crop_top_left"], b["crop_top_left"])


def test_preset_with_buckets(photos: LabelStudioDataset) -> None:
    pre = npu_data.NpuPreprocessor(image_size=64, augment_level=2, buckets=BUCKETS,
                                   normalize=(0.5, 0.5), dtype=torch.bfloat16)
    assert isinstance(pre.transforms[0], RandomHorizontalFlip)  # diffusers' order
    assert isinstance(pre.crop, ResizeCrop) and pre.crop.crop == "random"
    sampler = BucketBatchSampler(photos, 2, BUCKETS, num_replicas=1, rank=0)
    batch = next(iter(DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pre)))
    assert tuple(batch["image"].shape[2:]) in BUCKETS
    assert batch["image"].dtype == torch.bfloat16
    sdxl = npu_data.NpuPreprocessor(image_size=512, augment_level=0, buckets="sdxl")
    assert sdxl.transforms[0].buckets[0] == (512, 512)  # type: ignore[attr-defined]
    with pytest.raises(UserError):
        npu_data.NpuPreprocessor(image_size=(64, 32), buckets="sdxl")


def test_our_dataloader_moves_the_buckets_on_and_resumes_them_exactly(
        photos: LabelStudioDataset) -> None:
    """The loader's epochs reach the batch sampler (a new order each pass without calling its
    set_epoch), and its state_dict/load_state_dict resume a bucketed epoch mid-way exactly."""
    def loader() -> DataLoader:
        sampler = BucketBatchSampler(photos, 2, BUCKETS, num_replicas=1, rank=0, seed=3)
        return DataLoader(photos, batch_sampler=sampler, device="cpu", seed=3,
                          transform=Compose([ResizeCrop(None, crop="random", buckets=BUCKETS)]))

    first = loader()
    epochs = [[b["index"].tolist() for b in first] for _ in range(2)]
    assert epochs[0] != epochs[1] and sorted(sum(epochs[0], [])) == sorted(sum(epochs[1], []))
    run = loader()
    it = iter(run)
    seen = [next(it), next(it)]
    state = json.loads(json.dumps(run.state_dict()))  # plain data
    rest = [b for b in it]
    resumed = loader()
    resumed.load_state_dict(state)
    again = list(resumed)
    assert [b["index"].tolist() for b in again] == [b["index"].tolist() for b in rest]
    for a, b in zip(again, rest, strict=True):
        assert torch.equal(a["image"], b["image"])
    assert len(seen) + len(rest) == len(run)
    assert [b["index"].tolist() for b in resumed] != [b["index"].tolist() for b in again]


def test_a_shard_batch_request_carries_its_bucket(photos: LabelStudioDataset) -> None:
    """A ``ShardDataset`` batch of a ``BucketBatchSampler`` leaves the main process as a
    request naming its bucket; the reader's ResizeCrop (crop at read) outputs that bucket."""
    from npu_data.batch import BatchRequest, HostBatch
    from npu_data.loaders.assemble import collate_host

    ds = photos.dataset
    sampler = BucketBatchSampler(ds, 3, BUCKETS, num_replicas=1, rank=0, seed=5)
    pipe = Compose([ResizeCrop(None, crop="random", buckets=BUCKETS), RandomHorizontalFlip()])
    loader = DataLoader(ds, batch_sampler=sampler, device="cpu", transform=pipe, seed=5)
    loader._requests.begin(loader, 0)
    requests = list(loader._index_sampler)
    assert requests and all(isinstance(r, BatchRequest) for r in requests)
    for r in requests:
        assert r.bucket is not None
        assert {int(sampler.bucket_of[i]) for i in r.indices} == {r.bucket}
        host = collate_host(ds.__getitems__(r))
        assert isinstance(host, HostBatch) and host.cropped and host.image is not None
        assert tuple(host.image.shape[2:]) == sampler.groups[r.bucket]
