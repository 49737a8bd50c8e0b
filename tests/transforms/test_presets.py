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


def test_classification_is_torchvisions_reference_preset() -> None:
    """``ClassificationPresetTrain`` + ``get_mixup_cutmix`` as the reference writes them."""
    from npu_data.transforms import (
        AutoAugment,
        CutMix,
        MixUp,
        RandAugment,
        RandomChoice,
        RandomErasing,
        TrivialAugmentWide,
        presets,
    )

    plain = presets.classification(176)
    assert [type(t) for t in plain.transforms] == [RandomResizedCrop, RandomHorizontalFlip,
                                                   Normalize]
    crop = plain.transforms[0]
    assert isinstance(crop, RandomResizedCrop)
    assert crop.size == (176, 176) and crop.scale == (0.08, 1.0) and crop.min_visible == 0.0
    full = presets.classification(32, auto_augment_policy="ta_wide", random_erase_prob=0.1,
                                  mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=5)
    assert [type(t) for t in full.transforms] == [RandomResizedCrop, RandomHorizontalFlip,
                                                  TrivialAugmentWide, RandomErasing, Normalize,
                                                  RandomChoice]
    choice = full.transforms[-1]
    assert isinstance(choice, RandomChoice) and choice.p == [0.5, 0.5]
    assert [type(t) for t in choice.transforms] == [MixUp, CutMix]
    assert [t.alpha for t in choice.transforms] == [0.2, 1.0]  # type: ignore[attr-defined]
    assert full.transforms[2].interpolation == "bilinear"  # type: ignore[attr-defined]
    ra = presets.classification(32, auto_augment_policy="ra", ra_magnitude=7, hflip_prob=0)
    assert [type(t) for t in ra.transforms] == [RandomResizedCrop, RandAugment, Normalize]
    assert ra.transforms[1].magnitude == 7  # type: ignore[attr-defined]
    aa = presets.classification(32, auto_augment_policy="imagenet", cutmix_alpha=1.0)
    assert [type(t) for t in aa.transforms][-2:] == [Normalize, CutMix]
    assert isinstance(aa.transforms[2], AutoAugment)
    batch = {**_batch(), "label": torch.tensor([0, 1, 2, 4])}
    del batch["boxes.xyxy"]  # classification data
    out = full(batch, torch.Generator().manual_seed(0))
    assert out["image"].shape == (4, 3, 32, 32) and out["image"].dtype == torch.float32
    assert out["label"].shape == (4, 5)
    with pytest.raises(UserError, match="auto_augment_policy"):
        presets.classification(32, auto_augment_policy="augmix")


@pytest.mark.parametrize("kind", ["hflip", "ssd", "ssdlite", "lsj"])
def test_detection_is_torchvisions_reference_preset(kind: str) -> None:
    from npu_data.transforms import (
        FixedSizeCrop,
        RandomIoUCrop,
        RandomPhotometricDistort,
        RandomZoomOut,
        SanitizeBoundingBoxes,
        ScaleJitter,
        presets,
    )

    want = {"hflip": [RandomHorizontalFlip],
            "ssd": [RandomPhotometricDistort, RandomZoomOut, RandomIoUCrop,
                    RandomHorizontalFlip],
            "ssdlite": [RandomIoUCrop, RandomHorizontalFlip],
            "lsj": [ScaleJitter, FixedSizeCrop, RandomHorizontalFlip]}[kind]
    pipe = presets.detection(kind, target_size=48)
    assert [type(t) for t in pipe.transforms] == [*want, SanitizeBoundingBoxes, Normalize]
    for t in pipe.transforms:
        if isinstance(t, RandomZoomOut | FixedSizeCrop):
            assert t.fill == (123, 117, 104)
    assert pipe.keyed
    gen = torch.Generator().manual_seed(0)
    xy = torch.rand(4, 6, 2, generator=gen) * 30
    batch = {**_batch(), "boxes.xyxy": torch.cat([xy, xy + torch.rand(4, 6, 2,
                                                                      generator=gen) * 9], -1)}
    out = pipe(batch, gen)
    image = out["image"]
    assert image.dtype == torch.float32 and 0.0 <= float(image.min()) <= float(image.max()) <= 1.0
    if kind == "lsj":
        assert image.shape[2:] == (48, 48)
    boxes = out["boxes.xyxy"]
    w, h = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    assert not (out["boxes.valid"] & ((w < 1) | (h < 1) | (w * h < 1))).any()
    with pytest.raises(UserError, match="data_augmentation"):
        presets.detection("multiscale")
