"""Random transforms: seeded determinism, per-sample parameters, replay through the CPU
reference, channels-last inputs, argument errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ResizeCenterCrop,
    ResizeCrop,
    functional,
    replay_reference,
    sample_image,
)


def _batch(seed: int = 0, b: int = 8) -> dict[str, torch.Tensor]:
    """A padded batch of smooth images (so a 1-level resize difference stays 1 level)."""
    gen = torch.Generator().manual_seed(seed)
    h, w = 48, 64
    small = torch.randint(0, 256, (b, 3, 6, 8), dtype=torch.uint8, generator=gen)
    image = torch.nn.functional.interpolate(small.float(), size=(h, w), mode="bilinear")
    image = image.round().clamp(0, 255).to(torch.uint8)
    sizes = torch.tensor([[h, w], [40, 64], [48, 30], [20, 20]] * (b // 4))
    return {"image": image, "sizes": sizes}


def _diff(t, batch, params, i):  # type: ignore[no-untyped-def]
    out = t.apply(batch, params)
    ref = replay_reference(t, sample_image(batch, i), params, i).astype(np.int32)
    got = sample_image(out, i).astype(np.int32)
    assert ref.shape == got.shape
    return np.abs(ref - got)


TRANSFORMS = {
    "crop": (RandomResizedCrop(24), 1),
    "crop_rect": (RandomResizedCrop((20, 28), scale=(0.5, 1.0)), 1),
    "resize": (Resize((30, 40)), 1),
    "center": (CenterCrop(16), 0),
    "resize_center": (ResizeCenterCrop(24, resize_size=28), 1),
    "flip": (RandomHorizontalFlip(), 0),
    "brightness": (ColorJitter(brightness=0.5), 0),
    "contrast": (ColorJitter(contrast=0.5), 0),
    "saturation": (ColorJitter(saturation=0.5), 0),
    "hue": (ColorJitter(hue=0.3), 1),
    "jitter_bcs": (ColorJitter(0.4, 0.4, 0.4), 0),
    "jitter_all": (ColorJitter(0.4, 0.4, 0.4, 0.1), 1),
    "jitter_fixed": (ColorJitter(0.4, 0.4, 0.4, 0.1, order="fixed"), 1),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_replayed_params_match_the_reference(name: str) -> None:
    t, tol = TRANSFORMS[name]
    batch = _batch(1)
    params = t.get_params(batch, torch.Generator().manual_seed(11))
    for i in range(batch["image"].shape[0]):
        assert _diff(t, batch, params, i).max() <= tol, (name, i)


def test_full_compose_replays_through_the_reference() -> None:
    t = Compose([RandomResizedCrop(32), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()])
    batch = _batch(2, b=12)
    out, params = t.run(batch, torch.Generator().manual_seed(3))
    assert set(params) == {"0.boxes", "0.crop_top_left", "1.order", "1.brightness",
                           "1.contrast", "1.saturation", "1.hue", "2.flip"}
    keyed = t.draw_keyed(batch["sizes"].numpy(), np.arange(12, dtype=np.uint64))
    assert {k: (v.dtype, v.shape) for k, v in params.items()} == {  # one sampler: same form
        k: (v.dtype, v.shape) for k, v in keyed.items()}
    assert torch.equal(t.apply(batch, params)["image"], out["image"])
    crop = t.transforms[0]
    cropped = crop.apply(batch, {"boxes": params["0.boxes"]})
    rest = Compose(t.transforms[1:])
    rest_params = {f"{int(k[0]) - 1}{k[1:]}": v for k, v in params.items() if k[0] != "0"}
    means = []
    for i in range(12):
        # the colour and flip stages replay within hue's 1 level on the device's crop
        ref = replay_reference(rest, sample_image(cropped, i), rest_params, i).astype(np.int32)
        assert np.abs(ref - sample_image(out, i).astype(np.int32)).max() <= 1
        # end to end: where the crop matches exactly so does the rest; a 1-level crop
        # difference may be stretched by the jitter, but stays rare
        d = _diff(t, batch, params, i)
        if _diff(crop, batch, {"boxes": params["0.boxes"]}, i).max() == 0:
            assert d.max() <= 1
        means.append(float(d.mean()))
    assert np.mean(means) < 0.5


def test_same_seed_same_output_different_seed_different() -> None:
    t = Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()])
    batch = _batch(3)
    a, pa = t.run(batch, torch.Generator().manual_seed(5))
    b, pb = t.run(batch, torch.Generator().manual_seed(5))
    c, pc = t.run(batch, torch.Generator().manual_seed(6))
    assert torch.equal(a["image"], b["image"]) and all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(a["image"], c["image"])


def test_samples_get_their_own_parameters() -> None:
    batch = _batch(4, b=32)
    gen = torch.Generator().manual_seed(0)
    boxes = RandomResizedCrop(24).get_params(batch, gen)["boxes"]
    assert len({tuple(r) for r in boxes.tolist()}) > 24
    flips = RandomHorizontalFlip().get_params(batch, gen)["flip"]
    assert 0 < int(flips.sum()) < 32
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1).get_params(batch, gen)
    for k in ("brightness", "contrast", "saturation", "hue"):
        assert jitter[k].unique().numel() == 32
    assert len({tuple(r) for r in jitter["order"].tolist()}) > 8
    assert sorted(jitter["order"][0].tolist()) == [0, 1, 2, 3]


def test_random_resized_crop_boxes_respect_scale_ratio_and_bounds() -> None:
    batch = _batch(5, b=64)
    t = RandomResizedCrop(24, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    box = t.get_params(batch, torch.Generator().manual_seed(1))["boxes"]
    top, left, h, w = box.unbind(1)
    hh, ww = batch["sizes"].unbind(1)
    assert bool(((top >= 0) & (left >= 0) & (top + h <= hh) & (left + w <= ww)).all())
    area = (h * w).float() / (hh * ww).float()
    # rounding each side to whole pixels can move the area a little off the range
    assert bool(((area > 0.15) & (area < 0.7)).all())
    r = w.float() / h.float()
    assert bool(((r > 0.4) & (r < 2.5)).all())


def test_random_resized_crop_falls_back_to_torchvisions_central_crop() -> None:
    # no candidate of 4-9x the area fits: torchvision's central crop, nearest allowed ratio
    sizes = torch.tensor([[40, 100], [100, 40], [50, 60]])
    batch = {"image": torch.zeros(3, 3, 100, 100, dtype=torch.uint8), "sizes": sizes}
    box = RandomResizedCrop(8, scale=(4.0, 9.0)).get_params(batch)["boxes"].tolist()
    expect = []
    for hh, ww in sizes.tolist():
        in_ratio = ww / hh
        if in_ratio < 3 / 4:
            w, h = ww, int(round(ww / (3 / 4)))
        elif in_ratio > 4 / 3:
            h, w = hh, int(round(hh * (4 / 3)))
        else:
            h, w = hh, ww
        expect.append([(hh - h) // 2, (ww - w) // 2, h, w])
    assert box == expect


def test_identity_factors_leave_pixels_exactly_unchanged() -> None:
    # ColorJitter's per-sample order relies on this for the blend ops
    batch = _batch(6)
    ones = torch.ones(8)
    for fn in (functional.adjust_brightness, functional.adjust_contrast,
               functional.adjust_saturation):
        out = dict(batch, image=fn(batch["image"], batch["sizes"], ones))
        for i in range(8):  # valid pixels unchanged (the kernels zero the padding)
            assert np.array_equal(sample_image(out, i), sample_image(batch, i))


def test_random_order_differs_from_the_fixed_order_only_where_the_order_differs() -> None:
    batch = _batch(7, b=16)
    rand = ColorJitter(0.6, 0.6, 0.6)
    params = rand.get_params(batch, torch.Generator().manual_seed(3))
    fixed = ColorJitter(0.6, 0.6, 0.6, order="fixed")
    a = rand.apply(batch, params)["image"]
    canon = dict(params, order=torch.tensor([0, 1, 2]).expand(16, 3))
    b = fixed.apply(batch, canon)["image"]
    same = (params["order"] == torch.tensor([0, 1, 2])).all(1)
    assert bool(same.any()) and not bool(same.all())
    for i in range(16):
        if same[i]:
            assert torch.equal(a[i], b[i])
    assert any(not torch.equal(a[i], b[i]) for i in range(16) if not same[i])


@pytest.mark.parametrize("name", ["crop", "flip", "jitter_all", "resize_center"])
def test_channels_last_input_gives_the_same_result(name: str) -> None:
    t, _ = TRANSFORMS[name]
    batch = _batch(8)
    params = t.get_params(batch, torch.Generator().manual_seed(4))
    cl = dict(batch, image=batch["image"].contiguous(memory_format=torch.channels_last))
    assert torch.equal(t.apply(batch, params)["image"], t.apply(cl, params)["image"])


def test_bare_tensor_in_tensor_out_and_other_keys_pass_through() -> None:
    images = _batch(9)["image"]
    out = RandomResizedCrop(16)(images, torch.Generator().manual_seed(0))
    assert isinstance(out, torch.Tensor) and out.shape == (8, 3, 16, 16)
    batch = dict(_batch(9), caption=["a"] * 8, index=torch.arange(8))
    res = ColorJitter(brightness=0.3)(batch)
    assert res["caption"] == batch["caption"] and torch.equal(res["index"], batch["index"])
    assert torch.equal(res["sizes"], batch["sizes"])
    crop = RandomResizedCrop((10, 12))(batch)
    assert crop["sizes"].tolist() == [[10, 12]] * 8


def test_normalize_matches_the_reference_and_picks_the_memory_format() -> None:
    batch = _batch(10)
    t = Normalize(channels_last=True)
    out = t(batch)["image"]
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    ref = replay_reference(t, sample_image(batch, 0), {}, 0)
    np.testing.assert_allclose(out[0].permute(1, 2, 0).numpy(), ref, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ColorJitter(brightness=-0.1),
        lambda: ColorJitter(contrast=(1.2, 0.8)),
        lambda: ColorJitter(hue=0.6),
        lambda: ColorJitter(hue=(-0.7, 0.1)),
        lambda: ColorJitter(saturation="lots"),
        lambda: ColorJitter(order="sorted"),
        lambda: RandomResizedCrop(0),
        lambda: RandomResizedCrop((24, -1)),
        lambda: RandomResizedCrop(24, scale=(0.9, 0.1)),
        lambda: RandomResizedCrop(24, scale=(-0.1, 0.5)),
        lambda: RandomResizedCrop(24, ratio=(0.0, 1.0)),
        lambda: RandomResizedCrop(24, min_visible=1.5),
        lambda: RandomHorizontalFlip(p=1.2),
        lambda: Resize(0),
        lambda: Resize(24, max_size=20),
        lambda: ResizeCrop(24, crop="top"),
        lambda: ResizeCrop(None, buckets="sd15"),
        lambda: ResizeCenterCrop(24, resize_size=0),
        lambda: Normalize(std=(0.2, 0.0, 0.2)),
        lambda: Normalize(dtype=torch.int32),
        lambda: Compose([]),
        lambda: Compose([lambda x: x]),
    ],
)
def test_bad_arguments_raise_user_errors(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError):
        make()


@pytest.mark.parametrize(
    "data",
    [
        torch.zeros(3, 8, 8, dtype=torch.uint8),  # no batch dimension
        torch.zeros(2, 3, 8, 8, dtype=torch.float32),  # not uint8
        {"sizes": torch.zeros(2, 2)},  # no image
        {"image": torch.zeros(2, 3, 8, 8, dtype=torch.uint8), "sizes": torch.zeros(3, 2)},
        [1, 2, 3],
    ],
)
def test_bad_inputs_raise_user_errors(data: object) -> None:
    with pytest.raises(UserError):
        RandomResizedCrop(4)(data)
