"""Device kernels vs the Pillow references, padding invariance, formats, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import functional as F
from npu_data.transforms.oracle import pillow as R

RNG = np.random.default_rng(1234)
COLOUR = [
    ("adjust_brightness", 0.0, 2.5),
    ("adjust_contrast", 0.0, 2.5),
    ("adjust_saturation", 0.0, 2.5),
    ("adjust_hue", -0.5, 0.5),
]


def _batch(b: int = 5, h: int = 40, w: int = 53) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    imgs = RNG.integers(0, 256, (b, h, w, 3), dtype=np.uint8)
    sizes = torch.tensor(
        [[h, w], [1, w], [h, 1]]
        + [[int(RNG.integers(1, h + 1)), int(RNG.integers(1, w + 1))] for _ in range(b - 3)]
    )
    return imgs, torch.from_numpy(imgs).permute(0, 3, 1, 2), sizes


def _crop(imgs: np.ndarray, sizes: torch.Tensor, b: int) -> np.ndarray:
    h, w = sizes[b].tolist()
    return np.ascontiguousarray(imgs[b, :h, :w])


@pytest.mark.parametrize("name,lo,hi", COLOUR)
def test_colour_kernels_match_pillow(name: str, lo: float, hi: float) -> None:
    imgs, x, sizes = _batch()
    f = torch.tensor(RNG.uniform(lo, hi, len(imgs)), dtype=torch.float32)
    out = getattr(F, name)(x, sizes, f)
    for b in range(len(imgs)):
        h, w = sizes[b].tolist()
        ref = getattr(R, name)(_crop(imgs, sizes, b), float(f[b]))
        got = out[b, :, :h, :w].permute(1, 2, 0).numpy()
        assert np.abs(got.astype(int) - ref).max() == 0, (name, b)


@pytest.mark.parametrize("name,lo,hi", COLOUR)
def test_padding_does_not_leak(name: str, lo: float, hi: float) -> None:
    imgs, x, sizes = _batch()
    f = torch.tensor(RNG.uniform(lo, hi, len(imgs)), dtype=torch.float32)
    noisy = x.clone()
    noisy[:, :, :, :] = torch.randint(0, 256, noisy.shape, dtype=torch.uint8)
    _, _, hh, ww = x.shape
    rows = torch.arange(hh).view(1, 1, hh, 1) < sizes[:, 0].view(-1, 1, 1, 1)
    mask = rows & (torch.arange(ww).view(1, 1, 1, ww) < sizes[:, 1].view(-1, 1, 1, 1))
    noisy = torch.where(mask, x, noisy)
    a, b = getattr(F, name)(x, sizes, f), getattr(F, name)(noisy, sizes, f)
    assert torch.equal(a * mask, b * mask)


def test_resized_crop_matches_pillow_within_one_level() -> None:
    diffs = []
    for _ in range(4):
        imgs, x, sizes = _batch(6, int(RNG.integers(5, 90)), int(RNG.integers(5, 90)))
        boxes = []
        for b, (h, w) in enumerate(sizes.tolist()):
            bh, bw = (
                (1 if b == 3 else int(RNG.integers(1, h + 1))),
                (1 if b == 4 else int(RNG.integers(1, w + 1))),
            )
            boxes.append(
                (int(RNG.integers(0, h - bh + 1)), int(RNG.integers(0, w - bw + 1)), bh, bw)
            )
        size = (int(RNG.integers(1, 120)), int(RNG.integers(1, 120)))
        out = F.resized_crop(x, sizes, torch.tensor(boxes), size)
        assert out.shape == (6, 3, *size) and out.dtype == torch.uint8
        for b in range(6):
            ref = R.resized_crop(_crop(imgs, sizes, b), boxes[b], size)
            diffs.append(np.abs(out[b].permute(1, 2, 0).numpy().astype(int) - ref).reshape(-1))
    d = np.concatenate(diffs)
    assert d.max() <= 1 and d.mean() < 0.1


def test_resized_crop_identity_and_channels_last() -> None:
    imgs, x, sizes = _batch(3, 30, 40)
    sizes = torch.tensor([[30, 40]] * 3)
    boxes = torch.tensor([[0, 0, 30, 40]] * 3)
    assert torch.equal(F.resized_crop(x, sizes, boxes, (30, 40)), x.contiguous())
    cl = x.contiguous(memory_format=torch.channels_last)
    b2 = torch.tensor([[3, 5, 20, 11], [0, 0, 1, 40], [10, 2, 20, 38]])
    assert torch.equal(
        F.resized_crop(cl, sizes, b2, 17), F.resized_crop(x.contiguous(), sizes, b2, 17)
    )
    for name, lo, hi in COLOUR:
        f = torch.tensor(RNG.uniform(lo, hi, 3), dtype=torch.float32)
        assert torch.equal(
            getattr(F, name)(cl, sizes, f), getattr(F, name)(x.contiguous(), sizes, f)
        )


def test_hflip_within_valid_width() -> None:
    imgs, x, sizes = _batch()
    flags = torch.tensor([True, False, True, True, False])
    out = F.hflip(x, sizes, flags)
    for b in range(len(imgs)):
        h, w = sizes[b].tolist()
        ref = R.hflip(_crop(imgs, sizes, b)) if flags[b] else _crop(imgs, sizes, b)
        assert np.array_equal(out[b, :, :h, :w].permute(1, 2, 0).numpy(), ref)
        assert torch.equal(out[b, :, :, w:], x[b, :, :, w:])


def test_normalize_and_to_dtype() -> None:
    imgs, x, _ = _batch(2)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    out = F.normalize(x, mean, std)
    assert out.dtype == torch.float32
    for b in range(2):
        assert np.array_equal(out[b].numpy(), R.normalize(imgs[b], mean, std))
    bf = F.normalize(x, mean, std, dtype=torch.bfloat16, channels_last=True)
    assert bf.dtype == torch.bfloat16 and bf.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(F.to_dtype(x), x.float() / 255.0)


def test_deterministic() -> None:
    _, x, sizes = _batch()
    f = torch.full((5,), 0.3)
    assert torch.equal(F.adjust_hue(x, sizes, f), F.adjust_hue(x, sizes, f))


def test_bad_arguments() -> None:
    _, x, sizes = _batch()
    with pytest.raises(UserError, match="uint8"):
        F.adjust_brightness(x.float(), sizes, torch.ones(5))
    with pytest.raises(UserError, match=r"\(B, 3, H, W\)"):
        F.adjust_brightness(x[:, :2], sizes, torch.ones(5))
    with pytest.raises(UserError, match="non-negative"):
        F.adjust_contrast(x, sizes, -torch.ones(5))
    with pytest.raises(UserError, match="0.5"):
        F.adjust_hue(x, sizes, torch.full((5,), 0.7))
    with pytest.raises(UserError, match="positive"):
        F.resized_crop(x, sizes, torch.zeros(5, 4, dtype=torch.long), 0)
    with pytest.raises(UserError, match="boxes"):
        F.resized_crop(x, sizes, torch.zeros(4, 4, dtype=torch.long), 8)
    with pytest.raises(UserError, match="sizes"):
        F.hflip(x, sizes[:3], torch.ones(5, dtype=torch.bool))
