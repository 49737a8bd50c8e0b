"""NpuPreprocessor levels: the ops each level runs and the shapes it produces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_data
from npu_data.errors import UserError
from npu_data.transforms import (
    ColorJitter,
    Normalize,
    NpuPreprocessor,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ResizeCenterCrop,
    replay_reference,
    sample_image,
)


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (4, 3, 40, 56), dtype=torch.uint8, generator=gen)
    return {"image": image, "sizes": torch.tensor([[40, 56], [40, 30], [25, 56], [40, 40]]),
            "boxes.xyxy": torch.tensor([[[5.0, 5.0, 20.0, 20.0]]] * 4)}


@pytest.mark.parametrize(
    ("level", "ops"),
    [
        (0, [ResizeCenterCrop]),
        (1, [RandomHorizontalFlip, RandomResizedCrop]),  # diffusers' order: flip, then crop
        (2, [RandomHorizontalFlip, RandomResizedCrop, ColorJitter]),
        (3, [RandomHorizontalFlip, RandomResizedCrop, ColorJitter]),
    ],
)
def test_levels_run_their_ops_and_give_the_output_shape(level: int, ops: list[type]) -> None:
    pre = NpuPreprocessor(image_size=24, augment_level=level)
    assert [type(t) for t in pre.transforms] == ops
    out, params = pre.run(_batch(), torch.Generator().manual_seed(1))
    assert out["image"].shape == (4, 3, 24, 24) and out["image"].dtype == torch.uint8
    assert out["sizes"].tolist() == [[24, 24]] * 4
    assert out["boxes.xyxy"].shape == (4, 1, 4) and out["boxes.valid"].shape == (4, 1)
    if level >= 2:
        jitter = pre.transforms[2]
        assert isinstance(jitter, ColorJitter)
        expect_hue = (-0.1, 0.1) if level == 3 else None
        assert jitter.ranges["hue"] == expect_hue
        strength = 0.4 if level == 3 else 0.2
        assert jitter.ranges["brightness"] == pytest.approx((1 - strength, 1 + strength))
    for i in range(4):
        ref = replay_reference(pre, sample_image(_batch(), i), params, i)
        assert np.abs(ref.astype(int) - sample_image(out, i).astype(int)).max() <= 2


def test_level_zero_is_the_central_square_of_the_shorter_side() -> None:
    pre = NpuPreprocessor(image_size=20, augment_level=0)
    a = pre(_batch(), torch.Generator().manual_seed(1))
    b = pre(_batch(), torch.Generator().manual_seed(2))
    assert torch.equal(a["image"], b["image"])  # no randomness
    params = pre.get_params(_batch())
    # the whole image resized (shorter side 20, the longer truncated), then the centre window
    assert params["0.boxes"].tolist() == [[0, 0, 40, 56], [0, 0, 40, 30], [0, 0, 25, 56],
                                          [0, 0, 40, 40]]
    assert params["0.windows"].tolist() == [[0, 4, 20, 28], [3, 0, 26, 20], [0, 12, 20, 44],
                                            [0, 0, 20, 20]]


def test_normalize_option_and_top_level_name() -> None:
    assert npu_data.NpuPreprocessor is NpuPreprocessor
    pre = NpuPreprocessor(16, augment_level=1, normalize=True, channels_last=True)
    assert isinstance(pre.transforms[-1], Normalize)
    out = pre(_batch()["image"], torch.Generator().manual_seed(0))
    assert out.shape == (4, 3, 16, 16) and out.dtype == torch.float32
    assert out.is_contiguous(memory_format=torch.channels_last)
    custom = NpuPreprocessor(16, 0, normalize=((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
    val = custom(_batch()["image"])
    assert float(val.min()) >= -1.0 and float(val.max()) <= 1.0


@pytest.mark.parametrize("kwargs", [{"augment_level": 4}, {"augment_level": -1},
                                    {"image_size": 0}, {"normalize": "imagenet"}])
def test_bad_preset_arguments(kwargs: dict[str, object]) -> None:
    args = {"image_size": 32, "augment_level": 1, **kwargs}
    with pytest.raises(UserError):
        NpuPreprocessor(**args)  # type: ignore[arg-type]
