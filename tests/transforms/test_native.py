"""The compiled CPU kernels: exact against Pillow, equal to the pure-torch kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.errors import UserError
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms.oracle import pillow as R
from tests.support.batches import random_padded


def test_compiled_kernels_load_here() -> None:
    # CI machines have a compiler: a silent fallback would hide a 10x slowdown
    assert _native.available()


@pytest.mark.parametrize("hue", [0.1, -0.37, 0.5])
def test_hue_is_exact_for_every_rgb_value(hue: float) -> None:
    codes = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(codes >> 16) & 255, (codes >> 8) & 255, codes & 255], -1)
    img = rgb.astype(np.uint8).reshape(4096, 4096, 3)
    batch = torch.from_numpy(img).permute(2, 0, 1)[None].contiguous()
    out = F.adjust_hue(batch, torch.tensor([[4096, 4096]]), torch.tensor([hue]))
    expected = R.adjust_hue(img, hue)
    got = out[0].permute(1, 2, 0).numpy()
    assert np.array_equal(got, expected), int((got != expected).any(-1).sum())


def test_hue_constant_products_give_pillows_values() -> None:
    """The compiled hue multiplies where Pillow divides by a constant (color.cpp): h0 / 6.0
    and h * 6.0 / 255.0; it computes s / 255.0 and the H and S levels' products by 255.0 in
    float. In IEEE arithmetic (numpy computes as C does) these give Pillow's levels for every
    (branch, a, c) and (d, maxc), and its i, f and fs for all 256 values."""
    v = np.arange(256).astype(np.float32).astype(np.float64)
    div, mul = v * 6.0 / 255.0, v * (6.0 / 255.0)
    assert np.array_equal(div.astype(np.int64), mul.astype(np.int64))
    fd = (div - div.astype(np.int64).astype(np.float32)).astype(np.float32)
    fm = (mul - mul.astype(np.int64).astype(np.float32)).astype(np.float32)
    assert np.array_equal(fd, fm)
    assert np.array_equal((v / 255.0).astype(np.float32), v.astype(np.float32) / np.float32(255))
    d, m = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")  # S: (d, maxc), d <= maxc
    sv = d.astype(np.float32) / np.maximum(m, 1).astype(np.float32)
    assert np.array_equal((sv.astype(np.float64) * 255.0).astype(np.int64)[d <= m],
                          (sv * np.float32(255)).astype(np.int64)[d <= m])
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    cr = np.maximum(np.maximum(a, c), 1).astype(np.float32)
    qa, qc = a.astype(np.float32) / cr, c.astype(np.float32) / cr
    for h0 in (qc - qa, (2.0 + qa.astype(np.float64) - qc).astype(np.float32),
               (4.0 + qa.astype(np.float64) - qc).astype(np.float32)):
        levels = []
        for y in (h0.astype(np.float64) / 6.0 + 1.0, h0.astype(np.float64) * (1.0 / 6.0) + 1.0):
            y = np.where(y >= 1.0, y - 1.0, y)  # fmod(y, 1.0) on [5/6, 11/6]
            levels.append(np.clip((y.astype(np.float32).astype(np.float64) * 255.0)
                                  .astype(np.int64), 0, 255))
        # and the level's product by 255.0 in float
        levels.append(np.clip((y.astype(np.float32) * np.float32(255)).astype(np.int64), 0, 255))
        assert np.array_equal(levels[0], levels[1]) and np.array_equal(levels[0], levels[2])


def test_hue_back_to_rgb_in_float_rounds_like_pillows_double() -> None:
    """hsv2rgb's p, q and t: Pillow computes v * (1.0 - ...) in double, the compiled hue in
    float (color.cpp). Both round (half up) to the same integer for all 2^24 (v, s, h)."""
    hf = np.arange(256).astype(np.float32).astype(np.float64) * 6.0 / 255.0
    f = (hf - hf.astype(np.int64).astype(np.float32)).astype(np.float32)  # per h
    v = np.arange(256).astype(np.float32)[:, None]

    def rounded(x: np.ndarray) -> np.ndarray:
        return np.minimum(np.floor(x) + (x - np.floor(x) >= 0.5), 255)

    one = np.float32(1)
    for s in (np.arange(256).astype(np.float32) / 255.0).astype(np.float32):
        v64 = v.astype(np.float64)  # numpy 1 would keep float32 for a float64 scalar
        pillow = (v64 * (1.0 - np.float64(s)), v64 * (1.0 - (s * f).astype(np.float64))[None],
                  v64 * (1.0 - np.float64(s) * (1.0 - f.astype(np.float64)))[None])
        ours = (v * (one - s), v * (one - s * f)[None], v * (one - s * (one - f))[None])
        for d, x in zip(pillow, ours, strict=True):
            assert x.dtype == np.float32 and d.dtype == np.float64
            assert np.array_equal(rounded(d) + 0 * f, rounded(x) + 0 * f), float(s)


def _crop_cases(rng: np.random.Generator, n: int) -> list[tuple[int, int, int, int, int, int]]:
    cases = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(1, 260, 2))
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        oh, ow = (int(v) for v in rng.integers(1, 240, 2))
        cases.append((h, w, ch, cw, oh, ow))
    return cases


def test_resized_crop_matches_pillow_in_both_pass_orders() -> None:
    rng = np.random.default_rng(7)
    orders = set()
    for h, w, ch, cw, oh, ow in _crop_cases(rng, 150):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        box = [top, left, ch, cw]
        batch = torch.from_numpy(img).permute(2, 0, 1)[None].contiguous()
        out = F.resized_crop(batch, torch.tensor([[h, w]]), torch.tensor([box]), (oh, ow))
        expected = R.resized_crop(img, box, (oh, ow))
        assert np.array_equal(out[0].permute(1, 2, 0).numpy(), expected), (h, w, box, oh, ow)
        orders.add((ch - oh) > 0 and (ch - oh) > 2 * (cw - ow))
    assert orders == {True, False}  # both of Pillow 13's pass orders were exercised


def test_reference_is_pillow_crop_then_resize() -> None:
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (120, 90, 3), dtype=np.uint8)
    expected = np.asarray(Image.fromarray(img).crop((5, 7, 85, 107)).resize((30, 20),
                                                                               Image.BILINEAR))
    assert np.array_equal(R.resized_crop(img, [7, 5, 100, 80], (20, 30)), expected)


@pytest.mark.parametrize("order", ["random", "fixed"])
def test_compiled_and_torch_kernels_give_the_same_batches(order: str) -> None:
    pipe = Compose([RandomResizedCrop((96, 80)), ColorJitter(0.4, 0.4, 0.4, 0.1, order=order),
                    RandomHorizontalFlip()])
    batch = random_padded(11, 12, (1, 200), (1, 200))[1]
    native, _ = pipe.run(batch, torch.Generator().manual_seed(5))
    with _native.disabled():
        assert _native.for_tensor(batch["image"]) is None
        torch_path, _ = pipe.run(batch, torch.Generator().manual_seed(5))
    assert torch.equal(native["image"], torch_path["image"])


def test_each_colour_op_equals_the_torch_kernel_including_padding() -> None:
    batch = random_padded(2, 6, (1, 200), (1, 200))[1]
    x, sizes = batch["image"], batch["sizes"]
    factors = torch.tensor([0.0, 0.5, 1.0, 1.3, 2.0, 0.9])
    for fn, f in ((F.adjust_brightness, factors), (F.adjust_contrast, factors),
                  (F.adjust_saturation, factors), (F.adjust_hue, factors / 4 - 0.2)):
        fast = fn(x, sizes, f)
        with _native.disabled():
            slow = fn(x, sizes, f)
        assert torch.equal(fast, slow), fn.__name__


def test_box_outside_the_batch_is_a_one_line_error() -> None:
    images = torch.zeros(2, 3, 10, 12, dtype=torch.uint8)
    sizes = torch.tensor([[10, 12], [10, 12]])
    with pytest.raises(UserError, match=r"sample 1 .* outside the 10x12 batch"):
        F.resized_crop(images, sizes, torch.tensor([[0, 0, 5, 5], [6, 0, 5, 5]]), 4)


@pytest.mark.slow
def test_disabled_by_environment_falls_back_to_torch_kernels() -> None:
    code = ("import torch; from npu_data.transforms import _native, functional as F; "
            "assert not _native.available(); "
            "x = torch.arange(2*3*8*8, dtype=torch.int64).remainder(256).to(torch.uint8)"
            ".view(2, 3, 8, 8); "
            "out = F.resized_crop(x, torch.tensor([[8, 8]] * 2), torch.tensor([[0, 0, 8, 8]] * 2), 5); "
            "print(tuple(out.shape))")
    env = {**os.environ, "NPU_DATA_NATIVE": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(2, 3, 5, 5)"


def test_resized_crop_reads_channels_last_and_strided_batches_directly() -> None:
    rng = np.random.default_rng(5)
    hwc = torch.from_numpy(rng.integers(0, 256, (4, 90, 70, 3), dtype=np.uint8))
    nchw = hwc.permute(0, 3, 1, 2).contiguous()
    sizes = torch.tensor([[90, 70]] * 4)
    boxes = torch.tensor([[0, 0, 90, 70], [10, 5, 41, 60], [3, 2, 80, 7], [50, 60, 1, 1]])
    expected = F.resized_crop(nchw, sizes, boxes, (33, 47))
    for layout in (hwc.permute(0, 3, 1, 2),  # channels-last, as the loaders collate
                   nchw.contiguous(memory_format=torch.channels_last),
                   torch.cat([nchw, nchw], dim=3)[..., :70]):  # rows with a wider stride
        assert torch.equal(F.resized_crop(layout, sizes, boxes, (33, 47)), expected)


def test_interleaved_crops_resize_like_planar_ones_for_every_pass_order() -> None:
    """Channels-last crops (deinterleaved, then the passes over 16 x 16 transposed tiles plus
    edges) equal NCHW ones for every shape: both passes, horizontal only (the height kept),
    vertical only, vertical first, tiny and odd boxes."""
    rng = np.random.default_rng(21)
    hwc = torch.from_numpy(rng.integers(0, 256, (1, 150, 190, 3), dtype=np.uint8))
    nchw = hwc.permute(0, 3, 1, 2).contiguous()
    sizes = torch.tensor([[150, 190]])
    cases = [((40, 50), [0, 0, 150, 190]), ((37, 50), [5, 9, 37, 181]),  # height kept
             ((33, 47), [7, 3, 140, 47]), ((20, 60), [1, 2, 149, 70]),  # width kept; v first
             ((16, 16), [0, 0, 16, 16]), ((9, 13), [3, 4, 17, 33]), ((5, 7), [149, 189, 1, 1])]
    for _ in range(24):
        h, w = int(rng.integers(1, 151)), int(rng.integers(1, 191))
        box = [int(rng.integers(0, 151 - h)), int(rng.integers(0, 191 - w)), h, w]
        cases.append(((int(rng.integers(1, 80)), int(rng.integers(1, 80))), box))
    for size, box in cases:
        boxes = torch.tensor([box])
        assert torch.equal(F.resized_crop(hwc.permute(0, 3, 1, 2), sizes, boxes, size),
                           F.resized_crop(nchw, sizes, boxes, size)), (size, box)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normalize_equals_the_torch_kernel_bit_for_bit(channels_last: bool,
                                                       dtype: torch.dtype) -> None:
    x = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (3, 3, 17, 29), np.uint8))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    fast = F.normalize(x, mean, std, dtype=dtype, channels_last=channels_last)
    with _native.disabled():
        slow = F.normalize(x, mean, std, dtype=dtype, channels_last=channels_last)
    assert fast.dtype == slow.dtype == dtype and fast.stride() == slow.stride()
    assert torch.equal(fast, slow)
