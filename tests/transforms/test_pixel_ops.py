"""The pixel augmentations (issue 39): each functional op against its Pillow reference on padded
batches of mixed sizes (exact, blur within its bound), the transforms' keyed draws replayed
sample by sample, the device rules (no float64, no host sync, graph capture) and one-line
errors for bad arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from npu_data.errors import UserError
from npu_data.transforms import (
    Compose,
    GaussianBlur,
    RandomErasing,
    RandomGrayscale,
    RandomPhotometricDistort,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms._kernels.pixel import autocontrast_table_np
from npu_data.transforms.draws import sample_keys
from npu_data.transforms.oracle import pillow as R
from tests.support.batches import mixed_levels
from tests.support.device_audit import audit
from tests.support.device_cases import pixel_cases


def _valid(out: torch.Tensor, i: int, img: np.ndarray) -> np.ndarray:
    return out[i, :, : img.shape[0], : img.shape[1]].permute(1, 2, 0).numpy()


def _cases(seed: int, n: int) -> dict[str, tuple[Callable[..., torch.Tensor], Callable[..., Any]]]:
    rng = np.random.default_rng(seed + 100)
    bits = torch.from_numpy(rng.integers(0, 9, n))
    thr = torch.from_numpy(rng.uniform(-10, 270, n).astype(np.float32))
    thr[:3] = torch.tensor([0.0, 128.0, 255.0])
    fac = torch.from_numpy(rng.uniform(0, 3, n).astype(np.float32))
    fac[:2] = torch.tensor([0.0, 1.0])
    mask = torch.from_numpy(rng.random(n) < 0.5)
    return {
        "rgb_to_grayscale": (lambda x, s: F.rgb_to_grayscale(x, s, mask),
                             lambda i, im: R.rgb_to_grayscale(im) if mask[i] else im),
        "posterize": (lambda x, s: F.posterize(x, s, bits),
                      lambda i, im: R.posterize(im, int(bits[i]))),
        "solarize": (lambda x, s: F.solarize(x, s, thr),
                     lambda i, im: R.solarize(im, float(thr[i]))),
        "invert": (F.invert, lambda i, im: R.invert(im)),
        "equalize": (F.equalize, lambda i, im: R.equalize(im)),
        "autocontrast": (F.autocontrast, lambda i, im: R.autocontrast(im)),
        "adjust_sharpness": (lambda x, s: F.adjust_sharpness(x, s, fac),
                             lambda i, im: R.adjust_sharpness(im, float(fac[i]))),
    }


@pytest.mark.parametrize("op", list(_cases(0, 12)))
@pytest.mark.parametrize("seed", [0, 1])
def test_each_op_equals_pillow_on_padded_batches(op: str, seed: int) -> None:
    imgs, x, sizes = mixed_levels(seed, channels_last=seed == 1)
    kernel, ref = _cases(seed, len(imgs))[op]
    out = kernel(x, sizes)
    assert out.shape == x.shape and out.dtype == torch.uint8
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(_valid(out, i, img), ref(i, img), err_msg=f"{op} {i}")
        if op != "rgb_to_grayscale":  # the table ops zero the padding
            h, w = img.shape[:2]
            assert not out[i, :, h:].any() and not out[i, :, :, w:].any(), (op, i)


def test_erase_sets_the_box_only() -> None:
    imgs, x, sizes = mixed_levels(3)
    rng = np.random.default_rng(3)
    boxes = torch.tensor([[int(rng.integers(0, h)), int(rng.integers(0, w)),
                           int(rng.integers(0, h + 1)), int(rng.integers(0, w + 1))]
                          for h, w in sizes.tolist()])
    boxes[0, 2:] = 0  # an empty box erases nothing
    value = torch.from_numpy(rng.integers(0, 256, (len(imgs), 3)))
    out = F.erase(x, sizes, boxes, value)
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(_valid(out, i, img),
                                      R.erase(img, boxes[i].tolist(), value[i].tolist()))
    np.testing.assert_array_equal(_valid(out, 0, imgs[0]), imgs[0])


def test_equalize_and_autocontrast_edge_histograms() -> None:
    """One level, two levels, a last bin that rounds past 255, and all 2-level pairs of the
    autocontrast table against Pillow's own function."""
    cases = [np.full((5, 4, 3), 9, np.uint8), np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)]
    for n in (2, 3, 5, 7, 200):  # step // 2 plus the remainder reaching a full step
        row = np.concatenate([np.zeros(n * 255 + n - 1, np.uint8), np.full(3, 255, np.uint8)])
        cases.append(np.repeat(row[None, :, None], 3, axis=2))
    for img in cases:
        x = torch.from_numpy(img).permute(2, 0, 1).unsqueeze(0).contiguous()
        s = torch.tensor([img.shape[:2]])
        np.testing.assert_array_equal(_valid(F.equalize(x, s), 0, img), R.equalize(img))
        np.testing.assert_array_equal(_valid(F.autocontrast(x, s), 0, img), R.autocontrast(img))
    table = autocontrast_table_np()
    for lo, hi in ((0, 1), (3, 10), (17, 200), (254, 255), (0, 255), (100, 101), (5, 5)):
        img = Image.fromarray(np.array([[lo, hi]], np.uint8), "L")
        want = np.asarray(ImageOps.autocontrast(img.point(list(range(256)))))
        assert table[lo * 256 + hi][[lo, hi]].tolist() == want[0].tolist(), (lo, hi)
        probe = Image.fromarray(np.array([[lo, hi] + list(range(256))], np.uint8), "L")
        full = np.asarray(ImageOps.autocontrast(probe))[0, 2:]
        if (lo, hi) == (0, 255):
            np.testing.assert_array_equal(table[lo * 256 + hi], full)


@pytest.mark.parametrize("kernel_size", [1, 3, (5, 9), 23])
def test_gaussian_blur_within_one_level_of_torchvisions_formula(kernel_size: Any) -> None:
    imgs, x, sizes = mixed_levels(4)
    sigma = torch.linspace(0.1, 4.0, len(imgs))
    out = F.gaussian_blur(x, sizes, kernel_size, sigma)
    worst, off = 0, 0
    for i, img in enumerate(imgs):
        d = np.abs(_valid(out, i, img).astype(int)
                   - R.gaussian_blur(img, kernel_size, float(sigma[i])).astype(int))
        worst, off = max(worst, int(d.max())), off + int((d > 0).sum())
    assert worst <= 1 and off <= 2, (worst, off)
    if kernel_size == 1:  # one tap: the image itself
        assert torch.equal(out[:, :, :1, :1], x[:, :, :1, :1])


def test_gaussian_kernel_is_torchvisions() -> None:
    """The device weights follow torchvision v2's softmax-of-linspace form."""
    from npu_data.transforms._kernels.blur import kernel1d
    from npu_data.transforms.oracle.pillow_pixel import gaussian_kernel1d

    sigmas = torch.tensor([0.1, 0.7, 1.3, 5.0])
    for k in (1, 3, 7, 23):
        got = kernel1d(k, sigmas)
        for j, s in enumerate(sigmas.tolist()):
            torch.testing.assert_close(got[j], gaussian_kernel1d(k, s), rtol=2e-6, atol=1e-7)


_TRANSFORMS = {
    "GaussianBlur": GaussianBlur((5, 3), (0.1, 2.0)),
    "RandomGrayscale": RandomGrayscale(0.5),
    "RandomErasing": RandomErasing(0.8, value=(10, 20, 30)),
    "RandomErasing random": RandomErasing(0.8, value="random"),
    "RandomPhotometricDistort": RandomPhotometricDistort(),
    "SSD colour + erase": Compose([RandomPhotometricDistort(p=1.0), RandomErasing(1.0)]),
}


@pytest.mark.parametrize("name", list(_TRANSFORMS))
def test_keyed_draws_replay_on_the_reference(name: str) -> None:
    """A batch's keyed parameters give the reference's pixels sample by sample, and a sample's
    parameters do not depend on the batch it is drawn in."""
    t = _TRANSFORMS[name]
    imgs, x, sizes = mixed_levels(5, n=16)
    ids = np.arange(100, 116)
    params = t.draw_keyed(sizes.numpy(), sample_keys(7, 2, ids))
    out = t.apply({"image": x, "sizes": sizes}, params)["image"]
    for i, img in enumerate(imgs):
        ref = t.reference(img, params, i)
        if name == "GaussianBlur":
            assert np.abs(_valid(out, i, img).astype(int) - ref.astype(int)).max() <= 1
        else:
            np.testing.assert_array_equal(_valid(out, i, img), ref, err_msg=f"{name} {i}")
    alone = t.draw_keyed(sizes[3:4].numpy(), sample_keys(7, 2, ids[3:4]))
    for k, v in alone.items():
        assert torch.equal(v[0], params[k][3]), k


def test_erasing_draws_follow_torchvisions_rules() -> None:
    """Boxes inside the image, area within scale (up to rounding), none when p=0, and empty
    ones on 1-px images (torchvision rounds their sides to 0)."""
    t = RandomErasing(1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0))
    sizes = np.array([[100, 80]] * 200 + [[1, 1], [1, 50]])
    boxes = t.draw_keyed(sizes, sample_keys(0, 0, np.arange(202)))["boxes"].numpy()
    top, left, h, w = boxes[:200].T
    assert (h > 0).all() and (top + h <= 100).all() and (left + w <= 80).all()
    frac = h * w / 8000
    assert frac.min() > 0.07 and frac.max() < 0.24
    assert not (boxes[200:, 2] * boxes[200:, 3]).any()  # empty boxes, as torchvision's
    none = RandomErasing(0.0).draw_keyed(sizes, sample_keys(0, 0, np.arange(202)))["boxes"]
    assert not none.any()



def test_random_erasing_noise_is_keyed_normal_noise() -> None:
    """value="random": each pixel a keyed draw, standard normal after Normalize() (mean 0,
    std 1 but for the clipped tails), unrelated between channels, neighbours and samples;
    the same sample gets the same noise in another batch, padded otherwise."""
    t = RandomErasing(1.0, scale=(0.3, 0.3), ratio=(1.0, 1.0), value="random")
    sizes = np.array([[120, 120]] * 8)
    ids = np.arange(40, 48)
    params = t.draw_keyed(sizes, sample_keys(3, 1, ids))
    x = torch.zeros(8, 3, 120, 120, dtype=torch.uint8)
    out = t.apply({"image": x, "sizes": torch.from_numpy(sizes)}, params)["image"]
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1) * 255
    zs = []
    for i, (top, left, h, w) in enumerate(params["boxes"].tolist()):
        assert h == w == 66
        zs.append((out[i, :, top:top + h, left:left + w].float() - mean) / std)
    z = torch.stack(zs)  # (8, 3, 66, 66)
    assert abs(z.mean().item()) < 0.02 and 0.96 < z.std().item() < 1.0  # tails clipped
    flat = z.reshape(8, 3, -1)
    for a, b in ((flat[:, 0], flat[:, 1]), (z[..., 1:].reshape(-1), z[..., :-1].reshape(-1)),
                 (flat[0], flat[1])):
        assert abs(torch.corrcoef(torch.stack([a.reshape(-1), b.reshape(-1)]))[0, 1]) < 0.03
    alone = t.draw_keyed(sizes[5:6], sample_keys(3, 1, ids[5:6]))
    bigger = torch.zeros(1, 3, 150, 130, dtype=torch.uint8)  # padded otherwise
    again = t.apply({"image": bigger, "sizes": torch.tensor([[120, 120]])}, alone)["image"]
    assert torch.equal(again[0, :, :120, :120], out[5])
    from npu_data.transforms.noise import IMAGENET
    from npu_data.transforms.normalize import IMAGENET_MEAN, IMAGENET_STD

    assert IMAGENET == (IMAGENET_MEAN, IMAGENET_STD)  # the noise is Normalize()'s unit


def test_photometric_distort_draws() -> None:
    t = RandomPhotometricDistort(p=0.5)
    p = t.draw_keyed(np.full((4000, 2), 32), sample_keys(1, 0, np.arange(4000)))
    for op, (lo, hi), ident in (("brightness", (0.875, 1.125), 1.0), ("hue", (-0.05, 0.05), 0.0)):
        v = p[op].numpy()
        drawn = v != ident
        assert 0.45 < drawn.mean() < 0.55, op
        assert v[drawn].min() >= lo and v[drawn].max() <= hi, op
    perms = p["permutation"].numpy()
    assert (np.sort(perms, 1) == np.arange(3)).all()
    assert 0.4 < (perms != np.arange(3)).any(1).mean() < 0.5  # p * 5/6 of them move
    assert torch.equal(p["hue_on"], p["hue"] != 0)


@pytest.mark.parametrize("make, match", [
    (lambda: GaussianBlur(4), "odd and positive"),
    (lambda: GaussianBlur(3, sigma=0), "sigma must be finite"),
    (lambda: GaussianBlur((3, 3, 3)), "kernel_size must be an int"),
    (lambda: RandomGrayscale(1.5), "p must be a probability"),
    (lambda: RandomErasing(value="noise"), "value='noise' is not offered"),
    (lambda: F.erase(*mixed_levels(0)[1:], torch.zeros(12, 4), "random"), "needs noise_seeds"),
    (lambda: F.erase(*mixed_levels(0)[1:], torch.zeros(12, 4), "random",
                     noise_seeds=torch.full((12,), 1 << 32)), r"in \[0, 2\*\*32\)"),
    (lambda: F.erase(*mixed_levels(0)[1:], torch.zeros(12, 4), "random",
                     noise_seeds=torch.zeros(12, dtype=torch.int64), noise=((0.5,), (0.2,))),
     "noise must be"),
    (lambda: RandomErasing(value=300), "value must be a level 0..255"),
    (lambda: RandomErasing(scale=(0.5, 0.1)), "min <= max"),
    (lambda: RandomPhotometricDistort(hue=(-0.1, 0.7)), "hue must lie in"),
    (lambda: F.posterize(*mixed_levels(0)[1:], 9), "bits must lie in 0..8"),
    (lambda: F.gaussian_blur(*mixed_levels(0)[1:], 3, -1.0), "sigma must be > 0"),
    (lambda: F.adjust_sharpness(*mixed_levels(0)[1:], torch.full((12,), -1.0)), "non-negative"),
    (lambda: F.erase(*mixed_levels(0)[1:], torch.zeros(12, 3), 0), r"boxes must have shape \(12, 4\)"),
    (lambda: F.erase(*mixed_levels(0)[1:], torch.zeros(12, 4), 256), "levels must lie in 0..255"),
    (lambda: F.permute_channels(*mixed_levels(0)[1:], torch.zeros(12, 3)), "permutation of 0, 1, 2"),
    (lambda: F.invert(torch.zeros(2, 3, 4, 4), torch.ones(2, 2)), "uint8"),
])
def test_bad_arguments_are_one_line_user_errors(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(UserError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


# --- the device rules --------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(pixel_cases()))
def test_no_float64_and_no_host_sync_on_the_device_path(case: str) -> None:
    _, x, sizes = mixed_levels(6)
    fn = pixel_cases()[case]
    expected = fn(x, sizes)
    mode = audit(lambda: fn(x, sizes))
    assert sum(mode.ops.values()) > 0
    assert not mode.float64 and not mode.syncs, mode.summary()
    with accelerator_path():
        assert torch.equal(fn(x, sizes), expected)


@pytest.mark.newest_torch
@pytest.mark.parametrize("case", list(pixel_cases()))
def test_traced_whole_by_torch_compile(case: str) -> None:
    """``torch.compile(fullgraph=True)`` captures each op with no graph break and gives the
    eager pixels."""
    import torch._dynamo

    _, x, sizes = mixed_levels(7, n=12)
    fn = pixel_cases()[case]
    F.autocontrast(x, sizes)  # the autocontrast table is made eagerly, once
    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(x, sizes)
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, sizes)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got), case


@pytest.mark.parametrize("case", list(pixel_cases()))
def test_runs_on_the_meta_device(case: str) -> None:
    """No value is read back: on ``meta`` images and sizes (host parameters) each op gives the
    shape and dtype it gives on real tensors."""
    _, x, sizes = mixed_levels(6)
    fn = pixel_cases()[case]
    with accelerator_path():
        expected = fn(x, sizes)
    got = fn(x.to("meta"), sizes.to("meta"))
    assert got.device.type == "meta"
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)


@pytest.mark.slow
@pytest.mark.newest_torch
@pytest.mark.parametrize("case", ["policy_step", "gaussian_blur"])
def test_inductor_code_gives_the_eager_pixels(case: str) -> None:
    """Inductor's generated code (what ``torch.compile`` runs on CUDA) for one auto-augment
    step (every table op, Color, Sharpness) and the blur: the eager bytes."""
    import torch._dynamo

    _, x, sizes = mixed_levels(7, n=12)
    fn = pixel_cases()[case]
    F.autocontrast(x, sizes)
    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(x, sizes)
            got = torch.compile(fn, fullgraph=True)(x, sizes)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got), case
