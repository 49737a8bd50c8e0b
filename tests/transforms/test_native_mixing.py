"""The compiled CPU kernels of MixUp, CutMix, soft labels and channel permutation
(``_native/mixing.cpp``) give the torch kernels' bytes over many random batches, weights,
boxes and dtypes; the transforms that use them give the same batches on both."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from npu_data.transforms import CutMix, MixUp, RandomPhotometricDistort, _dispatch, backends
from npu_data.transforms import functional as F
from npu_data.transforms.draws import sample_keys

_OPS = ("mixup", "cutmix", "soft_labels", "permute_channels")


def _same(op: str, images: torch.Tensor, fn: Callable[[], torch.Tensor]) -> None:
    assert _dispatch.backend(op, images) == _dispatch.COMPILED
    got = fn()
    with backends.torch_kernels():
        assert _dispatch.backend(op, images) == _dispatch.TORCH
        expected = fn()
    assert got.dtype == expected.dtype and got.shape == expected.shape, op
    # equal bytes: NaN where NaN, the sign of zero kept
    assert got.numpy().tobytes() == expected.numpy().tobytes(), op


def test_the_mixing_ops_run_compiled_on_the_cpu_only() -> None:
    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    for op in _OPS:
        assert _dispatch.backend(op, x) == _dispatch.COMPILED
        assert _dispatch.backend(op, x.to("meta")) == _dispatch.TORCH
        with backends.accelerator_path():
            assert _dispatch.backend(op, x) == _dispatch.TORCH
    # other float dtypes promote through float32 in the torch kernel: it keeps them
    assert _dispatch.backend("mixup", x.to(torch.bfloat16)) == _dispatch.TORCH


def _lams(rng: np.random.Generator, b: int) -> torch.Tensor:
    """Weights of every kind: uniform, 0, 1, halves (ties when rounding) and tiny."""
    lam = rng.random(b).astype(np.float32)
    lam[::5] = 0.0
    lam[1::5] = 1.0
    lam[2::5] = 0.5
    lam[3::5] = np.float32(1e-7)
    return torch.from_numpy(lam)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_mixup_equals_the_torch_kernel(seed: int, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(900 + seed)
    b = int(rng.integers(1, 12))
    h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    raw = rng.integers(0, 256, size=(b, 3, h, w))
    x = torch.from_numpy(raw).to(dtype)
    if dtype == torch.float32:
        x = (x - 120.0) / 57.3  # normalised pixels
        x.view(-1)[:: 7] = float("nan") if seed == 0 else x.view(-1)[:: 7]
    partner = torch.from_numpy(rng.permutation(b))
    lam = _lams(rng, b)
    _same("mixup", x, lambda: F.mixup(x, partner, lam))
    cl = x.contiguous(memory_format=torch.channels_last)  # the layout a read crop gives
    _same("mixup", cl, lambda: F.mixup(cl, partner, lam))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64])
def test_cutmix_equals_the_torch_kernel(seed: int, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(1000 + seed)
    b = int(rng.integers(1, 10))
    h, w = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    x = torch.from_numpy(rng.integers(0, 256, size=(b, 3, h, w))).to(dtype)
    partner = torch.from_numpy(rng.integers(0, b, size=b))
    # boxes inside, across the edges, empty, negative and the whole image
    boxes = torch.from_numpy(np.stack([rng.integers(-5, h + 3, b), rng.integers(-5, w + 3, b),
                                       rng.integers(-2, h + 6, b), rng.integers(-2, w + 6, b)],
                                      1))
    boxes[0] = torch.tensor([0, 0, h, w])
    _same("cutmix", x, lambda: F.cutmix(x, partner, boxes))
    t = x.transpose(2, 3)
    _same("cutmix", t, lambda: F.cutmix(t, partner, boxes))


@pytest.mark.parametrize("seed", range(6))
def test_soft_labels_equal_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(1100 + seed)
    b, k = int(rng.integers(1, 16)), int(rng.integers(1, 1001))
    ids = torch.from_numpy(rng.integers(0, k, size=b))
    partner = torch.from_numpy(rng.integers(0, b, size=b))
    weight = _lams(rng, b)
    _same("soft_labels", ids, lambda: F.soft_labels(ids, partner, weight, k))
    for dtype in (torch.float32, torch.float64, torch.float16):  # rows given (already soft)
        rows = torch.from_numpy(rng.random((b, k))).to(dtype)
        _same("soft_labels", rows, lambda rows=rows: F.soft_labels(rows, partner, weight, None))


@pytest.mark.parametrize("seed", range(4))
def test_permute_channels_equals_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(1200 + seed)
    b = int(rng.integers(1, 10))
    h, w = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    x = torch.from_numpy(rng.integers(0, 256, size=(b, 3, h, w), dtype=np.uint8))
    sizes = torch.tensor([[h, w]] * b)
    perm = torch.from_numpy(np.stack([rng.permutation(3) for _ in range(b)]))
    _same("permute_channels", x, lambda: F.permute_channels(x, sizes, perm))
    cl = x.contiguous(memory_format=torch.channels_last)
    _same("permute_channels", cl, lambda: F.permute_channels(cl, sizes, perm))


def test_empty_batches() -> None:
    none = torch.zeros(0, dtype=torch.int64)
    for dtype in (torch.uint8, torch.float32):
        x = torch.zeros(0, 3, 4, 4, dtype=dtype)
        _same("mixup", x, lambda x=x: F.mixup(x, none, torch.zeros(0)))
        _same("cutmix", x, lambda x=x: F.cutmix(x, none, torch.zeros(0, 4, dtype=torch.int64)))


@pytest.mark.parametrize("seed", range(3))
def test_the_transforms_give_the_same_batches_on_both_kernels(seed: int) -> None:
    rng = np.random.default_rng(1300 + seed)
    b = 9
    image = torch.from_numpy(rng.integers(0, 256, size=(b, 3, 20, 24), dtype=np.uint8))
    sizes = torch.tensor([[20, 24]] * b)
    keys = sample_keys(seed, 0, np.arange(b))
    for t in (MixUp(0.4, num_classes=7), CutMix(1.0, num_classes=7), RandomPhotometricDistort(p=1.0)):
        batch = {"image": image, "sizes": sizes, "label": torch.arange(b) % 7}
        params = t.draw_keyed(sizes.numpy(), keys)
        got = t.apply(dict(batch), params)
        with backends.torch_kernels():
            expected = t.apply(dict(batch), params)
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, got[key]), (t, key)
