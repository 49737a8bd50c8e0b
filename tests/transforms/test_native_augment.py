"""The compiled CPU augmentation kernels (``_native/augment.cpp``) give the torch kernels' bytes
(what CUDA and the NPU run, and what ``npu-data parity`` bounds against Pillow) over many
random parameters, sizes and paddings."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import _dispatch, _native, backends
from npu_data.transforms import functional as F

_OPS = ("warp", "lut_op", "adjust_sharpness", "policy_step", "gaussian_blur", "choose", "vflip",
        "erase", "rgb_to_grayscale")


def _batch(rng: np.random.Generator, b: int, h: int, w: int, levels: int = 256
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch: sample i valid in its own (h_i, w_i) at the top-left, 0 outside; the
    last sample with few levels (flat areas, empty histogram bins)."""
    x = rng.integers(0, levels, size=(b, 3, h, w), dtype=np.uint8)
    x[-1] = x[-1] // 64 * 85
    hs = rng.integers(1, h + 1, size=b)
    ws = rng.integers(1, w + 1, size=b)
    hs[0], ws[0] = h, w  # one sample fills the batch
    for i in range(b):
        x[i, :, hs[i]:] = 0
        x[i, :, :, ws[i]:] = 0
    return torch.from_numpy(x), torch.from_numpy(np.stack([hs, ws], 1).astype(np.int64))


def _both(op: str, images: torch.Tensor, fn: Callable[[], torch.Tensor]
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn()`` with the compiled kernels and with the torch kernels (asserting which ran)."""
    assert _dispatch.backend(op, images) == _dispatch.COMPILED
    compiled = fn()
    with backends.torch_kernels():
        assert _dispatch.backend(op, images) == _dispatch.TORCH
        reference = fn()
    return compiled, reference


def _assert_same(op: str, images: torch.Tensor, fn: Callable[[], torch.Tensor],
                 what: str = "") -> None:
    got, expected = _both(op, images, fn)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    diff = int((got != expected).sum())
    assert diff == 0, f"{what or op}: {diff} values differ"


def test_the_augmentations_run_compiled_on_the_cpu_only() -> None:
    assert _native.available()
    x = torch.zeros(1, 3, 4, 4, dtype=torch.uint8)
    for op in _OPS:
        assert _dispatch.backend(op, x) == _dispatch.COMPILED
        assert _dispatch.backend(op, x.to("meta")) == _dispatch.TORCH  # the device path
        with backends.accelerator_path():
            assert _dispatch.backend(op, x) == _dispatch.TORCH


def _random_maps(rng: np.random.Generator, b: int, h: int, w: int) -> np.ndarray:
    """Inverse maps of every kind: general (shear, rotation, zoom in and out, mirrors), pure
    scales and shifts (Pillow's ImagingScaleAffine path for nearest), the identity, and
    points far outside the image."""
    m = rng.uniform(-2.0, 2.0, size=(b, 6))
    m[:, 2] = rng.uniform(-w, 2 * w, size=b)
    m[:, 5] = rng.uniform(-h, 2 * h, size=b)
    kind = rng.integers(0, 5, size=b)
    m[kind == 1, 1] = 0.0  # scale and shift only
    m[kind == 1, 3] = 0.0
    m[kind == 2] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    m[kind == 3, 2] += rng.choice([-1e12, 1e12])  # far outside: the tables' clamp
    m[kind == 4] = 1e13  # sums of table entries past 2**63: int64 wraps on both backends
    return m


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_warp_equals_the_torch_kernel(seed: int, interpolation: str) -> None:
    rng = np.random.default_rng(seed)
    b, h, w = int(rng.integers(1, 7)), int(rng.integers(1, 48)), int(rng.integers(1, 48))
    x, sizes = _batch(rng, b, h, w)
    maps = _random_maps(rng, b, h, w)
    fill = [int(v) for v in rng.integers(0, 256, size=3)]
    oh, ow = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    out_sizes = np.stack([rng.integers(1, oh + 1, size=b), rng.integers(1, ow + 1, size=b)], 1)
    _assert_same("warp", x, lambda: F.warp(x, sizes, maps, interpolation, fill))
    _assert_same("warp", x, lambda: F.warp(x, sizes, maps, interpolation, fill, out_sizes,
                                           (oh, ow)))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_affine_rotate_and_crop_equal_the_torch_kernel(seed: int, interpolation: str) -> None:
    rng = np.random.default_rng(100 + seed)
    b = int(rng.integers(1, 6))
    x, sizes = _batch(rng, b, int(rng.integers(2, 40)), int(rng.integers(2, 40)))
    angle = torch.from_numpy(rng.uniform(-180.0, 180.0, size=b))
    translate = torch.from_numpy(rng.uniform(-10.0, 10.0, size=(b, 2)))
    scale = torch.from_numpy(rng.uniform(0.3, 2.5, size=b))
    shear = torch.from_numpy(rng.uniform(-40.0, 40.0, size=(b, 2)))
    fill = int(rng.integers(0, 256))
    _assert_same("warp", x, lambda: F.affine(x, sizes, angle, translate, scale, shear,
                                             interpolation, fill))
    _assert_same("warp", x, lambda: F.rotate(x, sizes, angle, interpolation, [1, 2, 3]))
    hs, ws = sizes[:, 0], sizes[:, 1]
    top = torch.from_numpy(rng.integers(0, hs.numpy()))
    left = torch.from_numpy(rng.integers(0, ws.numpy()))
    boxes = torch.stack([top, left, hs - top, ws - left], 1)
    _assert_same("warp", x, lambda: F.crop(x, sizes, boxes))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_identity_maps_copy_each_sample(interpolation: str) -> None:
    """The identity (an auto-augment step's samples whose op is not geometric) copies the
    valid image and fills where the output is larger, as the torch kernel does."""
    rng = np.random.default_rng(9)
    x, sizes = _batch(rng, 4, 17, 23)
    ident = np.tile([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], (4, 1))
    out = F.warp(x, sizes, ident, interpolation)
    assert torch.equal(out, x)
    big = np.array([[20, 30]] * 4)
    _assert_same("warp", x, lambda: F.warp(x, sizes, ident, interpolation, [9, 8, 7], big,
                                           (21, 30)))


def test_the_compiled_warp_refuses_sizes_outside_the_batch() -> None:
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(UserError, match=r"sizes: sample 1's valid size \[9, 8\] is not inside "
                                        r"the 8x8 batch .* — pass each image's own"):
        F.warp(x, torch.tensor([[8, 8], [9, 8]]), np.tile([1.0, 0, 0, 0, 1.0, 0], (2, 1)))
    ops = backends.compiled_ops()  # the op itself checks too
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    t = torch.zeros(2, 8, dtype=torch.int64)
    fill = torch.zeros(3, dtype=torch.uint8)
    for bad in ([[8, 8], [9, 8]], [[8, 8], [8, 0]]):
        with pytest.raises(RuntimeError, match="valid size is not inside"):
            ops.warp(x, torch.tensor(bad), torch.tensor(bad), t, t, t, t, True, fill)


@pytest.mark.parametrize("seed", range(8))
def test_table_ops_equal_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    b = int(rng.integers(1, 7))
    x, sizes = _batch(rng, b, int(rng.integers(1, 40)), int(rng.integers(1, 40)),
                      levels=int(rng.choice([2, 5, 256])))
    bits = torch.from_numpy(rng.integers(0, 9, size=b))
    threshold = torch.from_numpy(rng.uniform(0.0, 256.0, size=b).astype(np.float32))
    for name, fn in (("equalize", lambda: F.equalize(x, sizes)),
                     ("autocontrast", lambda: F.autocontrast(x, sizes)),
                     ("invert", lambda: F.invert(x, sizes)),
                     ("posterize", lambda: F.posterize(x, sizes, bits)),
                     ("solarize", lambda: F.solarize(x, sizes, threshold))):
        _assert_same("lut_op", x, fn, name)


@pytest.mark.parametrize("seed", range(8))
def test_sharpness_equals_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    b = int(rng.integers(1, 7))
    x, sizes = _batch(rng, b, int(rng.integers(1, 30)), int(rng.integers(1, 30)))
    factors = torch.from_numpy(rng.choice([0.0, 0.1, 0.9, 1.0, 1.7, 2.0, 9.5], size=b)
                               .astype(np.float32))
    _assert_same("adjust_sharpness", x, lambda: F.adjust_sharpness(x, sizes, factors))


@pytest.mark.parametrize("seed", range(10))
def test_policy_step_equals_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(400 + seed)
    b = int(rng.integers(1, 10))
    x, sizes = _batch(rng, b, int(rng.integers(1, 36)), int(rng.integers(1, 36)))
    n_ops = len(F.POLICY_OPS)
    # a random mix, or every sample on one op (the passes skipped where no sample needs them)
    one = int(rng.integers(0, n_ops))
    ops = torch.from_numpy(rng.integers(0, n_ops, size=b) if seed % 2 else np.full(b, one))
    factors = torch.from_numpy(rng.uniform(0.0, 2.0, size=b).astype(np.float32))
    levels = torch.from_numpy(np.where(ops.numpy() == F.POLICY_OPS.index("Posterize"),
                                       rng.integers(0, 9, size=b), rng.integers(0, 257, size=b)))
    _assert_same("policy_step", x, lambda: F.policy_step(x, sizes, ops, factors, levels))


@pytest.mark.parametrize("seed", range(16))
def test_gaussian_blur_equals_the_torch_kernel(seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    b = int(rng.integers(1, 6))
    x, sizes = _batch(rng, b, int(rng.integers(1, 30)), int(rng.integers(1, 30)))
    kernel = (int(rng.choice([1, 3, 5, 9, 23])), int(rng.choice([1, 3, 7, 31])))
    sigma = torch.from_numpy(rng.uniform(0.1, 5.0, size=b).astype(np.float32))
    _assert_same("gaussian_blur", x, lambda: F.gaussian_blur(x, sizes, kernel, sigma))


@pytest.mark.parametrize("seed", range(6))
def test_vflip_erase_and_grayscale_equal_the_torch_kernels(seed: int) -> None:
    rng = np.random.default_rng(600 + seed)
    b = int(rng.integers(1, 8))
    h, w = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    x, sizes = _batch(rng, b, h, w)
    x[:, :, :, -1] = 200  # padding columns with values: the flip moves whole rows
    flags = torch.from_numpy(rng.random(b) < 0.6)
    # boxes inside, across the edges, empty and negative
    boxes = torch.from_numpy(np.stack([rng.integers(-5, h + 3, b), rng.integers(-5, w + 3, b),
                                       rng.integers(-2, h + 6, b), rng.integers(-2, w + 6, b)],
                                      1))
    value = torch.from_numpy(rng.integers(0, 256, size=(b, 3)))
    _assert_same("vflip", x, lambda: F.vflip(x, sizes, flags))
    _assert_same("erase", x, lambda: F.erase(x, sizes, boxes, value))
    _assert_same("erase", x, lambda: F.erase(x, sizes, boxes, 17))
    _assert_same("rgb_to_grayscale", x, lambda: F.rgb_to_grayscale(x, sizes, flags))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64])
def test_choose_equals_the_torch_kernel(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(11)
    images = torch.from_numpy(rng.integers(0, 256, size=(7, 3, 5, 6))).to(dtype)
    others = torch.from_numpy(rng.integers(0, 256, size=(7, 3, 5, 6))).to(dtype)
    for mask in (rng.random(7) < 0.5, np.zeros(7, bool), np.ones(7, bool)):
        m = torch.from_numpy(mask)
        _assert_same("choose", images, lambda m=m: F.choose(m, images, others))
        _assert_same("choose", images, lambda m=m: F.choose(m, images.transpose(2, 3),
                                                            others.transpose(2, 3)))
    empty = torch.zeros(0, 3, 2, 2, dtype=dtype)
    _assert_same("choose", empty, lambda: F.choose(torch.zeros(0, dtype=torch.bool), empty,
                                                   empty))


def test_a_strided_batch_gives_the_same_bytes() -> None:
    """A channels-last view (what a decoder's HWC batch gives) is read as its contiguous copy."""
    rng = np.random.default_rng(7)
    hwc = torch.from_numpy(rng.integers(0, 256, size=(3, 20, 24, 3), dtype=np.uint8))
    strided = hwc.permute(0, 3, 1, 2)
    sizes = torch.tensor([[20, 24], [13, 24], [20, 9]])
    ops = torch.tensor([F.POLICY_OPS.index(n) for n in ("Equalize", "Color", "Sharpness")])
    f = torch.tensor([0.3, 1.6, 0.2])
    angle = torch.tensor([30.0, -45.0, 90.0])
    cases: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = [
        ("policy_step", lambda x: F.policy_step(x, sizes, ops, f, torch.zeros(3, dtype=torch.int64))),
        ("warp", lambda x: F.rotate(x, sizes, angle, "bilinear")),
        ("gaussian_blur", lambda x: F.gaussian_blur(x, sizes, 5, torch.ones(3)))]
    for op, fn in cases:
        _assert_same(op, strided, lambda fn=fn: fn(strided))
        assert torch.equal(fn(strided), fn(strided.contiguous())), op
