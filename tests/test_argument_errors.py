"""A bad argument of a library call is the built-in a Python caller catches (``ValueError``,
``TypeError``) and still a ``UserError``, one line naming the fix, for the CLI (issue 32.4);
what is wrong with the data read at run time stays a plain ``UserError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import npu_data
import npu_data.transforms.functional as F
import npu_data.transforms.oracle.pillow as R
from npu_data import UserError
from npu_data.loaders import BucketBatchSampler, DataLoader, NpuDistributedSampler
from npu_data.transforms import (
    CaptionDropout,
    ColorJitter,
    Compose,
    Normalize,
    NpuPreprocessor,
    RandomCaption,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ResizeCrop,
)

B, H, W = 2, 8, 10
IMAGES = torch.zeros(B, 3, H, W, dtype=torch.uint8)
SIZES = torch.tensor([[H, W], [6, 7]], dtype=torch.int64)
BOXES = torch.tensor([[0, 0, 4, 4], [1, 1, 4, 5]], dtype=torch.int64)
IMG = np.zeros((6, 5, 3), np.uint8)
STORED = np.array([[512, 512], [768, 1024], [1024, 768], [600, 600]], np.int64)  # (N, 2)
SAMPLES = [torch.zeros(3, 4, 4, dtype=torch.uint8) for _ in range(4)]

Case = tuple[Callable[[], Any], type[Exception], str]

TRANSFORMS: dict[str, Case] = {
    "flip p": (lambda: RandomHorizontalFlip(p=1.5), ValueError,
               "RandomHorizontalFlip: p must be a probability in [0, 1], got 1.5"),
    "normalize lengths": (lambda: Normalize((0.5, 0.5), (0.2, 0.2, 0.2)), ValueError,
                          "mean and std need one value per channel, got 2 and 3"),
    "normalize mean None": (lambda: Normalize(None, 1.0), TypeError,  # type: ignore[arg-type]
                            "Normalize: mean must be a number or one number per channel"),
    "normalize mean text": (lambda: Normalize(["a"], 1.0), ValueError,  # type: ignore[list-item]
                            "Normalize: mean must be a number or one number per channel"),
    "normalize std": (lambda: Normalize(0.5, (1.0, 0.0, 1.0)), ValueError,
                      "std values must be > 0"),
    "normalize nan mean": (lambda: Normalize(float("nan"), 0.5), ValueError,
                           "Normalize: mean and std must be finite numbers"),
    "normalize inf std": (lambda: Normalize(0.5, (0.5, float("inf"), 0.5)), ValueError,
                          "Normalize: mean and std must be finite numbers"),
    "jitter negative": (lambda: ColorJitter(brightness=-1), ValueError,
                        "ColorJitter: brightness=-1 must be a non-negative number"),
    "jitter triple": (lambda: ColorJitter(contrast=(1, 2, 3)), TypeError,
                      "contrast must be a number or a pair (min, max)"),
    "jitter order": (lambda: ColorJitter(order="shuffled"), ValueError,
                     "order must be 'random' or 'fixed'"),
    "crop size 0": (lambda: RandomResizedCrop(0), ValueError,
                    "RandomResizedCrop: size must be positive, got 0 — e.g. size=224"),
    "crop size bool": (lambda: RandomResizedCrop(True), TypeError,
                       "size must be an int or (height, width), got True"),
    "crop scale order": (lambda: RandomResizedCrop(224, scale=(0.5, 0.1)), ValueError,
                         "scale must be a pair 0 <= min <= max"),
    "crop scale int": (lambda: RandomResizedCrop(224, scale=5), TypeError,  # type: ignore[arg-type]
                       "scale must be a pair (min, max), got 5"),
    "resize max_size": (lambda: Resize(224, max_size=100), ValueError,
                        "Resize: max_size must be an int > size, got 100"),
    "resizecrop crop": (lambda: ResizeCrop(crop="middle"), ValueError,
                        "crop must be 'center' or 'random', got 'middle'"),
    "resizecrop preset": (lambda: ResizeCrop(buckets="sd9"), ValueError,
                          "unknown bucket preset 'sd9'"),
    "compose empty": (lambda: Compose([]), ValueError, "Compose: give at least one transform"),
    "compose foreign": (lambda: Compose([abs]), TypeError,  # type: ignore[list-item]
                        "is not an npu_data transform"),
    "preset level": (lambda: NpuPreprocessor(augment_level=7), ValueError,
                     "NpuPreprocessor: augment_level must be one of"),
    "preset normalize": (lambda: NpuPreprocessor(normalize=5), TypeError,  # type: ignore[arg-type]
                         "NpuPreprocessor: normalize must be True, False or (mean, std)"),
    "caption p": (lambda: CaptionDropout(p=-0.1), ValueError,
                  "CaptionDropout: p must be a probability in [0, 1]"),
    "caption source": (lambda: RandomCaption(source="nope"), ValueError,
                       "RandomCaption: source must be one of"),
    "call on an array": (lambda: RandomHorizontalFlip()(IMG), TypeError,
                         "expected a batch dict or a uint8 tensor (B, C, H, W), got ndarray"),
    "call on 3-d": (lambda: RandomHorizontalFlip()(IMAGES[0]), ValueError,
                    "images must be a tensor (B, C, H, W), got torch.Size([3, 8, 10])"),
    "call on float": (lambda: RandomHorizontalFlip()(IMAGES.float()), TypeError,
                      "images must be uint8, got torch.float32 — apply Normalize last"),
    "call generator": (lambda: RandomHorizontalFlip()(IMAGES, generator=7),  # type: ignore[arg-type]
                       TypeError, "generator must be a torch.Generator"),
}

FUNCTIONAL: dict[str, Case] = {
    "float images": (lambda: F.adjust_brightness(IMAGES.float(), SIZES, torch.ones(B)), TypeError,
                     "images must be a uint8 tensor (B, C, H, W), got torch.float32"),
    "gray images": (lambda: F.hflip(IMAGES[:, :1], SIZES, torch.ones(B, dtype=torch.bool)),
                    ValueError, "images must have shape (B, 3, H, W), got (2, 1, 8, 10)"),
    "sizes shape": (lambda: F.hflip(IMAGES, SIZES[:1], torch.ones(B, dtype=torch.bool)),
                    ValueError, "sizes must have shape (2, 2) (height, width), got (1, 2)"),
    "negative factor": (lambda: F.adjust_contrast(IMAGES, SIZES, torch.tensor([1.0, -1.0])),
                        ValueError, "contrast factors must be non-negative"),
    "factor shape": (lambda: F.adjust_saturation(IMAGES, SIZES, torch.ones(3)), ValueError,
                     "saturation factors must have shape (2,), got (3,)"),
    "hue range": (lambda: F.adjust_hue(IMAGES, SIZES, torch.tensor([0.0, 0.7])), ValueError,
                  "hue factors must lie in [-0.5, 0.5]"),
    "box shape": (lambda: F.resized_crop(IMAGES, SIZES, BOXES[:, :3], 4), ValueError,
                  "crop boxes must have shape (2, 4) (top, left, height, width), got (2, 3)"),
    "box outside": (lambda: F.resized_crop(IMAGES, SIZES, torch.tensor([[0, 0, 4, 4],
                                                                        [6, 8, 4, 4]]), 4),
                    ValueError, "lies outside the 8x10 batch: clip it to the image"),
    "output size": (lambda: F.resized_crop(IMAGES, SIZES, BOXES, 0), ValueError,
                    "output size must be positive, got 0"),
    "window size": (lambda: F.resized_crop(IMAGES, SIZES, BOXES, 4,
                                           windows=torch.tensor([[0, 0, 4, 4], [0, 0, 0, 4]])),
                    ValueError, "resized_crop: window full sizes must be >= 1"),
    "jitter ops": (lambda: F.color_jitter(IMAGES, SIZES, [0, 0], None, *torch.ones(4, B)),
                   ValueError, "color_jitter: ops must be distinct ids in 0..3"),
    "normalize values": (lambda: F.normalize(IMAGES, (0.5, 0.5), (0.5, 0.5)), ValueError,
                         "mean and std need 3 values, got 2, 2"),
    "normalize std": (lambda: F.normalize(IMAGES, (0.5,) * 3, (0.5, 0.0, 0.5)), ValueError,
                      "std values must be positive"),
    "normalize float": (lambda: F.normalize(IMAGES.float(), (0.5,) * 3, (0.5,) * 3), TypeError,
                        "normalize: images must be a uint8 tensor (B, C, H, W), got torch.float32"),
    "normalize nan std": (lambda: F.normalize(IMAGES, (0.5,) * 3, (0.5, float("nan"), 0.5)),
                          ValueError, "normalize: mean and std must be finite numbers"),
}

REFERENCE: dict[str, Case] = {
    "a list": (lambda: R.adjust_brightness([[0]], 1.0), TypeError,  # type: ignore[arg-type]
               "reference.adjust_brightness: image must be a numpy array HxWx3, got list"),
    "float image": (lambda: R.hflip(IMG.astype(np.float32)), ValueError,
                    "reference.hflip: image must be HxWx3 uint8, got shape (6, 5, 3) float32"),
    "empty image": (lambda: R.hflip(IMG[:0]), ValueError, "reference.hflip: image is empty"),
    "factor None": (lambda: R.adjust_contrast(IMG, None), TypeError,  # type: ignore[arg-type]
                    "reference.adjust_contrast: factor must be a number, got None"),
    "factor text": (lambda: R.adjust_contrast(IMG, "x"), ValueError,  # type: ignore[arg-type]
                    "reference.adjust_contrast: factor must be a number, got 'x'"),
    "factor range": (lambda: R.adjust_hue(IMG, 0.7), ValueError,
                     "reference.adjust_hue: factor must be finite and [-0.5, 0.5], got 0.7"),
    "box outside": (lambda: R.resized_crop(IMG, (0, 0, 9, 9), 4), ValueError,
                    "box (top=0, left=0, height=9, width=9) does not fit in the 6x5 image"),
    "box length": (lambda: R.resized_crop(IMG, (0, 0, 2), 4), ValueError,
                   "reference.resized_crop: box must be (top, left, height, width)"),
    "size bool": (lambda: R.resized_crop(IMG, (0, 0, 2, 2), True), TypeError,
                  "reference.resized_crop: size must be an int or (height, width), got True"),
    "size 0": (lambda: R.resized_crop(IMG, (0, 0, 2, 2), (0, 3)), ValueError,
               "reference.resized_crop: size must be positive, got (0, 3)"),
    "window size": (lambda: R.resized_window(IMG, (0, 0, 2, 2), (0, 0, 0, 4), 2), ValueError,
                    "reference.resized_window: the full size must be positive, got (0, 4)"),
    "normalize values": (lambda: R.normalize(IMG, (0.5,), (0.5, 0.5, 0.5)), ValueError,
                         "reference.normalize: mean and std need 3 values, got 1 and 3"),
}

LOADERS: dict[str, Case] = {
    "device_prefetch": (lambda: DataLoader(SAMPLES, device="cpu", device_prefetch=-1),
                        ValueError, "device_prefetch=-1: use 0 (no prefetch) or more"),
    "image_key": (lambda: DataLoader(SAMPLES, device="cpu", image_key=1.5),  # type: ignore[arg-type]
                  TypeError, "DataLoader: image_key=1.5 must be a tuple position (int)"),
    "read_crop type": (lambda: DataLoader(SAMPLES, device="cpu", read_crop="yes"),  # type: ignore[arg-type]
                       TypeError, "DataLoader: read_crop='yes' must be True, False or None"),
    "read_crop refused": (lambda: DataLoader(SAMPLES, device="cpu", read_crop=True), ValueError,
                          "DataLoader(read_crop=True): the dataset is not a ShardDataset"),
    "decode": (lambda: DataLoader(SAMPLES, device="cpu", decode="turbo"), ValueError,
               "DataLoader: decode='turbo' must be 'exact'"),
    "read_thread": (lambda: DataLoader(SAMPLES, device="cpu", read_thread=1),  # type: ignore[arg-type]
                    TypeError, "DataLoader: read_thread=1 must be True, False or None"),
    "locality_block": (lambda: NpuDistributedSampler(SAMPLES, 1, 0, locality_block=0),
                       ValueError, "locality_block=0: use a positive block size or None"),
    "shard_window": (lambda: NpuDistributedSampler(SAMPLES, 1, 0, shard_window=0), ValueError,
                     "shard_window=0: use a positive number of shards or None"),
    "both windows": (lambda: NpuDistributedSampler(SAMPLES, 1, 0, shard_window=2,
                                                   locality_block=4),
                     ValueError, "shard_window and locality_block both given: choose one"),
    "no shards": (lambda: NpuDistributedSampler(SAMPLES, 1, 0, shard_window=2), TypeError,
                  "shard_window: list lists no shards — use a ShardDataset"),
    "batch_size": (lambda: BucketBatchSampler(STORED, 0, "sdxl", num_replicas=1, rank=0),
                   ValueError, "BucketBatchSampler: batch_size must be a positive int, got 0"),
    "rank": (lambda: BucketBatchSampler(STORED, 2, "sdxl", num_replicas=2, rank=5), ValueError,
             "BucketBatchSampler: rank 5 of 2 replicas — use 0 <= rank < num_replicas"),
    "no sizes()": (lambda: BucketBatchSampler(SAMPLES, 2, "sdxl", num_replicas=1, rank=0),
                   TypeError, "BucketBatchSampler: list has no sizes()"),
    "sizes shape": (lambda: BucketBatchSampler(np.zeros((4, 3)), 2, "sdxl", num_replicas=1,
                                               rank=0),
                    ValueError, "BucketBatchSampler: sizes must be (N, 2) (height, width)"),
    "preset": (lambda: BucketBatchSampler(STORED, 2, "sd9", num_replicas=1, rank=0), ValueError,
               "BucketBatchSampler: unknown bucket preset 'sd9'"),
    "bucket list": (lambda: BucketBatchSampler(STORED, 2, [(0, 5)], num_replicas=1, rank=0),
                    ValueError, "a non-empty list of (height, width)"),
}

CASES = {f"{group}: {name}": case for group, cases in (
    ("transforms", TRANSFORMS), ("functional", FUNCTIONAL), ("reference", REFERENCE),
    ("loaders", LOADERS)) for name, case in cases.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_argument_is_the_builtin_and_a_one_line_user_error(name: str) -> None:
    call, builtin, fragment = CASES[name]
    with pytest.raises(builtin) as info:
        call()
    e = info.value
    assert isinstance(e, UserError), type(e).__mro__  # the CLI still prints it on one line
    assert isinstance(e, npu_data.UserError) and e.exit_code == 1
    message = str(e)
    assert fragment in message and "\n" not in message, message
    # the other built-in is not claimed: a TypeError is no ValueError and back
    other = ValueError if builtin is TypeError else TypeError
    assert not isinstance(e, other)


def test_the_same_instance_reaches_a_plain_except_clause() -> None:
    """A caller's ``except ValueError`` catches it with the message the CLI shows."""
    try:
        RandomResizedCrop(224, ratio=(2.0, 1.0))
    except ValueError as e:
        caught: Exception = e
    assert isinstance(caught, UserError)
    assert str(caught) == "RandomResizedCrop: ratio must be a pair 0 < min <= max, got (2.0, 1.0)"


def test_data_mismatches_stay_plain_user_errors() -> None:
    """A saved state from another dataset, or a batch whose samples span buckets, is about
    the data, not an argument's type or value: a plain ``UserError``."""
    sampler = NpuDistributedSampler(SAMPLES, 1, 0)
    with pytest.raises(UserError, match="saved for a dataset of 9 samples but this one has 4") \
            as info:
        sampler.load_state_dict({"dataset_len": 9})
    assert not isinstance(info.value, ValueError | TypeError)

    mixed = {"image": torch.zeros(2, 3, 64, 64, dtype=torch.uint8),
             "sizes": torch.tensor([[1024, 1024], [768, 1344]])}
    with pytest.raises(UserError, match="fall in different buckets") as info:
        ResizeCrop()(mixed)
    assert not isinstance(info.value, ValueError | TypeError)
