"""Normalize through a per-channel table of the 256 uint8 values gives the bits of the formula
computed per pixel in float32 and cast once, ``((x / 255 - mean) / std).to(dtype)`` (what
both kernels computed before the table): every value, every channel, every float dtype, both
layouts, the compiled CPU kernel and the torch kernel (the CUDA / NPU code path), and
``torch.compile`` of the torch kernel."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest
import torch

from npu_data.transforms import Normalize, _native
from npu_data.transforms import functional as F
from npu_data.transforms._dispatch import COMPILED, TORCH, backend
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms._kernels.layout import normalize_table

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
STATS = {  # mean, std: ImageNet's, diffusion's [-1, 1], and awkward values in four channels
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "half": ((0.5,) * 3, (0.5,) * 3),
    "odd4": ((0.1, 0.73, 0.333, -0.2), (0.3, 0.051, 1.7, 3e-3)),
}
BACKENDS = (COMPILED, TORCH)


def formula(images: torch.Tensor, mean: Sequence[float], std: Sequence[float],
            dtype: torch.dtype) -> torch.Tensor:
    """The pixel-wise formula both kernels ran before the table."""
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return ((images.to(torch.float32) / 255.0 - m) / s).to(dtype)


@contextmanager
def on(which: str) -> Iterator[None]:
    """Run the compiled CPU kernel, or the torch kernel exactly as on CUDA / NPU."""
    with accelerator_path() if which == TORCH else nullcontext():
        yield


def every_value(channels: int) -> torch.Tensor:
    """(2, C, 16, 16): each plane holds all 256 values, in a different order per plane."""
    rng = np.random.default_rng(7)
    planes = [rng.permutation(256).reshape(16, 16) for _ in range(2 * channels)]
    return torch.from_numpy(np.stack(planes).reshape(2, channels, 16, 16).astype(np.uint8))


@pytest.mark.parametrize("which", BACKENDS)
@pytest.mark.parametrize("stats", list(STATS))
def test_every_value_of_every_channel_has_the_formulas_bits(which: str, stats: str) -> None:
    mean, std = STATS[stats]
    x = every_value(len(mean))
    for dtype in DTYPES:
        want = formula(x, mean, std, dtype)
        for channels_last in (False, True):
            with on(which):
                assert backend("normalize", x) == which
                got = F.normalize(x, mean, std, dtype, channels_last)
            assert got.dtype == dtype and got.shape == x.shape
            assert got.is_contiguous(
                memory_format=torch.channels_last if channels_last else torch.contiguous_format)
            # bit for bit: equal bit patterns (a NaN or a signed zero would show here)
            bits = torch.int32 if dtype == torch.float32 else torch.int16
            assert torch.equal(got.contiguous().view(bits), want.contiguous().view(bits)), (
                which, stats, dtype, channels_last)


@pytest.mark.parametrize("stats", list(STATS))
def test_the_table_is_the_formula_applied_to_the_256_values(stats: str) -> None:
    mean, std = STATS[stats]
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, len(mean), 1, 256)
    for dtype in DTYPES:
        table = normalize_table(torch.tensor(mean), torch.tensor(std), dtype)
        assert table.shape == (len(mean), 256) and table.dtype == dtype
        assert torch.equal(table, formula(values, mean, std, dtype)[0, :, 0])


@pytest.mark.parametrize("which", BACKENDS)
def test_random_batches_match_the_formula_in_any_input_layout(which: str) -> None:
    """Odd widths (the vector loop's tail), several samples, a channels-last uint8 input and a
    strided view as input."""
    rng = np.random.default_rng(3)
    mean, std = STATS["imagenet"]
    for shape in ((3, 3, 17, 29), (2, 3, 5, 97), (1, 3, 64, 64), (4, 3, 1, 1)):
        base = torch.from_numpy(rng.integers(0, 256, shape, np.uint8))
        inputs = (base, base.contiguous(memory_format=torch.channels_last), base[:, :, :, ::2])
        for x in inputs:
            for dtype in DTYPES:
                for channels_last in (False, True):
                    with on(which):
                        got = F.normalize(x, mean, std, dtype, channels_last)
                    assert torch.equal(got, formula(x, mean, std, dtype)), (shape, dtype)


def test_both_kernels_give_the_same_strides_and_the_transform_uses_them() -> None:
    x = every_value(3)
    t = Normalize(0.5, 0.5, dtype=torch.bfloat16, channels_last=True)
    sizes = torch.tensor([[16, 16], [16, 16]])
    fast = t({"image": x, "sizes": sizes})["image"]
    with _native.disabled():
        slow = t({"image": x, "sizes": sizes})["image"]
    assert fast.stride() == slow.stride() and torch.equal(fast, slow)
    assert torch.equal(fast, formula(x, (0.5,) * 3, (0.5,) * 3, torch.bfloat16))


@pytest.mark.newest_torch
def test_inductor_compiles_the_lookup_whole_and_equals_eager() -> None:
    """``torch.compile(fullgraph=True)`` with Inductor (the code CUDA runs) of the torch
    kernel: one graph, the eager bits, for bfloat16 and a channels-last float16 output."""
    import torch._dynamo

    mean, std = STATS["imagenet"]

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (F.normalize(x, mean, std, torch.bfloat16),
                F.normalize(x, mean, std, torch.float16, channels_last=True))

    x = torch.cat([every_value(3), every_value(3).flip(-1)])
    torch._dynamo.reset()
    try:
        with accelerator_path():
            want = fn(x)
            got = torch.compile(fn, fullgraph=True)(x)
    finally:
        torch._dynamo.reset()
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)
    assert torch.equal(want[0], formula(x, mean, std, torch.bfloat16))
