"""One bucket list (the sampler's, handed to the transform by the DataLoader, a mismatch
refused when the loader is built), kohya's bucket generator, scaled presets that say their
error and never merge, and ``no_upscale``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from loaders_fakes import photo_dataset

import npu_data
from npu_data.buckets import SDXL, Buckets, buckets_of, make_buckets
from npu_data.errors import UserError
from npu_data.loaders import BucketBatchSampler, DataLoader, LabelStudioDataset
from npu_data.transforms import Compose, RandomHorizontalFlip, ResizeCrop


def kohya(max_reso: int, min_size: int, max_size: int, divisible: int) -> set[tuple[int, int]]:
    """kohya sd-scripts' make_bucket_resolutions, as written there ((width, height) pairs)."""
    max_area = max_reso * max_reso
    resos = {(int(math.sqrt(max_area) // divisible) * divisible,) * 2}
    width = min_size
    while width <= max_size:
        height = min(max_size, int((max_area // width) // divisible) * divisible)
        if height >= min_size:
            resos.add((width, height))
            resos.add((height, width))
        width += divisible
    return resos


@pytest.mark.parametrize(("res", "lo", "hi", "step"), [(1024, 256, 2048, 64), (512, 128, 1024, 64),
                                                        (768, 256, 1024, 32)])
def test_make_buckets_is_kohyas_rule(res: int, lo: int, hi: int, step: int) -> None:
    got = make_buckets(res, step, lo, hi)
    assert {(w, h) for h, w in got} == kohya(res, lo, hi, step)
    assert all(h * w <= res * res and h % step == 0 and w % step == 0 for h, w in got)
    assert buckets_of("kohya", 512).sizes == make_buckets(512)


def test_scaled_presets_say_their_error_and_never_merge() -> None:
    for size in (512, 768):
        with pytest.warns(UserWarning, match="largest aspect error"):
            b = buckets_of("sdxl", size, who=f"t{size}", step=64 if size == 512 else 32)
        assert len(set(b.sizes)) == len(SDXL)  # nothing merged
        errors = [abs((bh / bw) / (h / w) - 1) for (h, w), (bh, bw) in zip(SDXL, b.sizes,
                                                                           strict=True)]
        assert b.aspect_error == pytest.approx(max(errors), abs=1e-6)
        assert b.aspect_error < 0.07 and str(round(100 * b.aspect_error, 1)) in b.describe()
    assert buckets_of("sdxl").sizes == SDXL and buckets_of("sdxl").aspect_error == 0
    with pytest.raises(UserError, match="would merge"):
        buckets_of("sdxl", 128)


def test_no_upscale_gives_small_photos_a_bucket_inside_them() -> None:
    rule = Buckets(SDXL, no_upscale=True)
    sizes = np.array([[3000, 2000], [700, 500], [300, 1000], [1024, 1024], [64, 64]])
    got = rule.targets(sizes)
    assert got[0].tolist() == [1216, 832]  # large: its listed bucket
    assert got[3].tolist() == [1024, 1024]
    for (h, w), (bh, bw) in zip(sizes[1:3], got[1:3], strict=True):
        assert bh <= h and bw <= w and bh % 64 == 0 and bw % 64 == 0
    plain = Buckets(SDXL).targets(sizes)
    assert (plain[1] > sizes[1]).any() and (got[1] <= sizes[1]).all()
    # the sampler groups by the same targets: every batch one size
    many = np.random.default_rng(1).integers(200, 1600, (80, 2))
    sampler = BucketBatchSampler(many, 4, "sdxl", no_upscale=True, num_replicas=1, rank=0)
    targets = Buckets(SDXL, no_upscale=True).targets(many)
    for batch in sampler:
        assert len({tuple(t) for t in targets[batch].tolist()}) == 1
        assert (targets[batch] <= np.maximum(many[batch], 64)).all()


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> LabelStudioDataset:
    return photo_dataset(tmp_path_factory.mktemp("rules"), 12, 150, 100)


MINE = [(64, 64), (48, 80), (80, 48)]


def test_resize_crop_takes_the_samplers_list(photos: LabelStudioDataset) -> None:
    sampler = BucketBatchSampler(photos, 4, MINE, num_replicas=1, rank=0)
    crop = ResizeCrop(None)
    loader = DataLoader(photos, batch_sampler=sampler, device="cpu",
                        transform=Compose([crop, RandomHorizontalFlip()]))
    assert crop.buckets == tuple(MINE)
    batches = list(loader)  # a whole epoch: no batch is refused
    assert len(batches) == len(sampler)
    assert sum(len(b["index"]) for b in batches) == len(photos)
    pre = npu_data.NpuPreprocessor(image_size=64, buckets="sampler")
    DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pre)
    assert pre.crop.buckets == tuple(MINE)  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:NpuPreprocessor")
def test_a_preprocessor_with_other_buckets_is_refused_at_build(
        photos: LabelStudioDataset) -> None:
    sdxl = BucketBatchSampler(photos, 4, "sdxl", num_replicas=1, rank=0)
    half = npu_data.NpuPreprocessor(image_size=512, buckets="sdxl")
    with pytest.raises(UserError, match="give both the same buckets") as e:
        DataLoader(photos, batch_sampler=sdxl, device="cpu", transform=half)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="same buckets"):
        DataLoader(photos, batch_sampler=BucketBatchSampler(photos, 4, MINE, num_replicas=1,
                                                            rank=0),
                   device="cpu", transform=ResizeCrop(None, buckets="sdxl"))
    # a list equal to the sampler's, however it was spelled, is the same list
    DataLoader(photos, batch_sampler=sdxl, device="cpu",
               transform=ResizeCrop(None, buckets=[list(b) for b in SDXL]))


def test_bucketless_batches_are_refused_at_build(photos: LabelStudioDataset) -> None:
    with pytest.raises(UserError, match="BucketBatchSampler"):
        DataLoader(photos, batch_size=4, device="cpu", transform=ResizeCrop(None))
    one = DataLoader(photos, batch_size=1, device="cpu", transform=ResizeCrop(None))
    assert next(iter(one))["image"].shape[0] == 1


def test_short_buckets_are_trained_short_with_equal_batches_per_rank(
        photos: LabelStudioDataset) -> None:
    per_rank = []
    for r in range(2):
        s = BucketBatchSampler(photos, 5, MINE, num_replicas=2, rank=r, seed=1)
        per_rank.append([b["index"].tolist() for b in DataLoader(
            photos, batch_sampler=s, device="cpu", transform=ResizeCrop(None), seed=1)])
    assert len(per_rank[0]) == len(per_rank[1])
    for batches in per_rank:
        for idx in batches:
            assert len(idx) == len(set(idx))
    assert {i for b in per_rank for idx in b for i in idx} == set(range(len(photos)))
    assert any(len(idx) < 5 for b in per_rank for idx in b)  # a short batch, trained
    assert torch.is_tensor(photos.sizes()) or isinstance(photos.sizes(), np.ndarray)


def test_no_upscale_through_the_loader(photos: LabelStudioDataset) -> None:
    """Photos smaller than SDXL's buckets: with no_upscale the sampler and the bound
    ResizeCrop agree on a bucket inside each photo, and nothing is upscaled."""
    sampler = BucketBatchSampler(photos, 3, "sdxl", no_upscale=True, num_replicas=1, rank=0)
    pre = npu_data.NpuPreprocessor(image_size=1024, augment_level=1, buckets="sampler")
    sizes = photos.sizes()
    n = 0
    for batch in DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pre):
        th, tw = batch["image"].shape[2:]
        for i in batch["index"].tolist():
            assert th <= sizes[i][0] and tw <= sizes[i][1]
            n += 1
    assert n == len(photos)
