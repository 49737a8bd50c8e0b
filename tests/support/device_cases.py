"""The device-rule workloads (issue 13): the kernels and transforms, each a function of a padded
batch with its parameters drawn first, that tests/transforms/test_device_rules.py audits and
tests/transforms/test_device_ops.py checks against docs/device-ops.md's table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from npu_data.transforms import (
    ColorJitter,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels.tables import color_tables
from tests.support.batches import keyed_params

B = 16  # samples per batch


def channels_last_batch(seed: int = 0, b: int = B) -> dict[str, torch.Tensor]:
    """A padded channels-last batch of mixed sizes up to 160x200 (sample 0 fills it), as the
    loaders collate it."""
    rng = np.random.default_rng(seed)
    sizes = np.stack([rng.integers(40, 161, b), rng.integers(40, 201, b)], 1)
    sizes[0] = (160, 200)
    x = rng.integers(0, 256, (b, 160, 200, 3), dtype=np.uint8)
    image = torch.from_numpy(x).permute(0, 3, 1, 2)  # channels-last, as the loaders collate
    return {"image": image, "sizes": torch.from_numpy(sizes.astype(np.int64)),
            "index": torch.arange(b)}


def jittered() -> dict[str, torch.Tensor]:
    """A batch as a crop leaves it (every sample 96x96), for the colour ops."""
    batch = channels_last_batch(1)
    crop = RandomResizedCrop(96)
    with _native.disabled():
        return crop.apply(batch, keyed_params(crop, batch, 3))


def with_geometry(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch plus every geometry group, float32 as the loaders collate them."""
    g = torch.Generator().manual_seed(4)
    b = batch["image"].shape[0]

    def rand(*shape: int, scale: float = 100.0) -> torch.Tensor:
        return torch.rand(*shape, generator=g) * scale

    xy = rand(b, 3, 2)
    out = dict(batch)
    out.update({
        "boxes.xyxy": torch.cat([xy, xy + rand(b, 3, 2, scale=40)], -1),
        "boxes.xywhr": torch.cat([xy, rand(b, 3, 2, scale=40), rand(b, 3, 1, scale=90)], -1),
        "boxes.valid": torch.ones(b, 3, dtype=torch.bool),
        "polygons.points": rand(b, 2, 5, 2), "polygons.vertex_valid": torch.ones(b, 2, 5,
                                                                               dtype=torch.bool),
        "polygons.valid": torch.ones(b, 2, dtype=torch.bool),
        "keypoints.xy": rand(b, 4, 2), "keypoints.valid": torch.ones(b, 4, dtype=torch.bool),
        "ellipses.params": torch.cat([rand(b, 2, 2), 1 + rand(b, 2, 2, scale=20),
                                      rand(b, 2, 1, scale=180)], -1),
        "ellipses.valid": torch.ones(b, 2, dtype=torch.bool),
        "masks.mask": (rand(b, 2, *batch["image"].shape[-2:], scale=1) > 0.5).to(torch.uint8),
        "masks.valid": torch.ones(b, 2, dtype=torch.bool),
    })
    return out


def transform_case(t: Any, batch: dict[str, torch.Tensor]) -> Callable[[], Any]:
    """``t`` applied to ``batch`` with parameters drawn beforehand."""
    params = keyed_params(t, batch, 3)
    return lambda: t.apply(batch, params)


def rule_cases() -> dict[str, Callable[[], Any]]:
    """The kernels (resized crop, the colour ops, flip, normalize) and the transforms over
    them, by name."""
    batch, small = channels_last_batch(), jittered()
    images, sizes = batch["image"], batch["sizes"]
    x, xs = small["image"], small["sizes"]
    crop = RandomResizedCrop(96)
    boxes = keyed_params(crop, batch, 3)["boxes"]
    factors = torch.linspace(0.6, 1.4, B)
    hues = torch.linspace(-0.1, 0.1, B)
    flips = torch.arange(B) % 2 == 0
    color_tables(x.device)  # the colour tables are made once, on the host
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1)
    return {
        "resized_crop 96": lambda: F.resized_crop(images, sizes, boxes, 96),
        "resized_crop (64, 80)": lambda: F.resized_crop(images, sizes, boxes, (64, 80)),
        "resized_crop (64, 80) lanczos": lambda: F.resized_crop(images, sizes, boxes, (64, 80),
                                                                interpolation="lanczos"),
        "adjust_brightness": lambda: F.adjust_brightness(x, xs, factors),
        "adjust_contrast": lambda: F.adjust_contrast(x, xs, factors),
        "adjust_saturation": lambda: F.adjust_saturation(x, xs, factors),
        "adjust_hue": lambda: F.adjust_hue(x, xs, hues),
        "hflip": lambda: F.hflip(x, xs, flips),
        "normalize": lambda: F.normalize(x, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        "RandomResizedCrop(96)": transform_case(crop, batch),
        "ColorJitter(0.4,0.4,0.4,0.1)": transform_case(jitter, small),
        "ColorJitter fixed order": transform_case(
            ColorJitter(0.4, 0.4, 0.4, 0.1, order="fixed"), small),
        "RandomHorizontalFlip": transform_case(RandomHorizontalFlip(), small),
        "Normalize": transform_case(Normalize(), small),
        "Compose crop+jitter+flip": transform_case(
            Compose([RandomResizedCrop(96), jitter, RandomHorizontalFlip()]), batch),
        "crop+flip with every geometry group": transform_case(
            Compose([RandomResizedCrop(96), RandomHorizontalFlip()]), with_geometry(batch)),
    }


CASES = rule_cases()


def pixel_cases() -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """The pixel ops of issue 39 as functions of a padded batch of 12 (``mixed_levels``)."""
    n = 12
    f = torch.linspace(0.2, 1.8, n)
    ops = torch.arange(n) % len(F.POLICY_OPS)
    levels = torch.arange(n) % 9
    return {
        "rgb_to_grayscale": lambda x, s: F.rgb_to_grayscale(x, s, torch.arange(n) % 2 == 0),
        "erase": lambda x, s: F.erase(x, s, torch.tensor([[1, 1, 2, 3]] * n), 5),
        "erase random": lambda x, s: F.erase(x, s, torch.tensor([[1, 1, 9, 7]] * n), "random",
                                             noise_seeds=torch.arange(n) * 1000003),
        "posterize": lambda x, s: F.posterize(x, s, levels),
        "solarize": lambda x, s: F.solarize(x, s, f * 100),
        "equalize": F.equalize,
        "autocontrast": F.autocontrast,
        "adjust_sharpness": lambda x, s: F.adjust_sharpness(x, s, f),
        "gaussian_blur": lambda x, s: F.gaussian_blur(x, s, (5, 3), f),
        "permute_channels": lambda x, s: F.permute_channels(
            x, s, torch.tensor([[2, 0, 1]] * n)),
        "policy_step": lambda x, s: F.policy_step(x, s, ops, f, levels),
    }
