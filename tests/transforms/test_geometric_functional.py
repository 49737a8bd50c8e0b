"""functional.affine / rotate / vflip against torchvision's PIL path (Pillow's transform and
rotate, run by ``oracle.pillow_geometric``): nearest and flips exact, bilinear within a level."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms.oracle import pillow_geometric as RG
from tests.support.device_audit import audit

RNG = np.random.default_rng(39)
B, H, W = 12, 37, 51


def _batch() -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    imgs = RNG.integers(0, 256, (B, H, W, 3), dtype=np.uint8)
    sizes = [[H, W], [1, W], [H, 1], [H, H]] + [
        [int(RNG.integers(2, H + 1)), int(RNG.integers(2, W + 1))] for _ in range(B - 4)]
    return imgs, torch.from_numpy(imgs).permute(0, 3, 1, 2), torch.tensor(sizes)


def _params() -> dict[str, torch.Tensor]:
    angle = torch.tensor(RNG.uniform(-180, 180, B))
    angle[:6] = torch.tensor([0.0, 90.0, 180.0, -90.0, 45.0, 270.0])
    translate = torch.tensor(RNG.uniform(-6, 6, (B, 2)))
    scale = torch.tensor(RNG.uniform(0.5, 1.6, B))
    shear = torch.tensor(RNG.uniform(-25, 25, (B, 2)))
    shear[0], shear[2] = 0.0, 0.0  # pure scale + translation: Pillow's scale path
    translate[1] = torch.tensor([3.0, -2.0])
    return {"angle": angle, "translate": translate, "scale": scale, "shear": shear}


def _sample(out: torch.Tensor, sizes: torch.Tensor, b: int) -> tuple[np.ndarray, int, int]:
    h, w = sizes[b].tolist()
    got = out[b].permute(1, 2, 0).numpy()
    assert not got[h:].any() and not got[:, w:].any(), "padding must stay 0"
    return got[:h, :w].astype(np.int64), h, w


@pytest.mark.parametrize("interpolation,bound", [("nearest", 0), ("bilinear", 1)])
def test_affine_matches_torchvision_pil(interpolation: str, bound: int) -> None:
    imgs, x, sizes = _batch()
    p = _params()
    out = F.affine(x, sizes, p["angle"], p["translate"], p["scale"], p["shear"],
                   interpolation, fill=(10, 200, 30))
    worst = 0
    for b in range(B):
        got, h, w = _sample(out, sizes, b)
        ref = RG.affine(imgs[b, :h, :w], float(p["angle"][b]), p["translate"][b].tolist(),
                        float(p["scale"][b]), p["shear"][b].tolist(), interpolation,
                        (10, 200, 30))
        worst = max(worst, int(np.abs(got - ref).max()))
    assert worst <= bound


@pytest.mark.parametrize("interpolation,bound", [("nearest", 0), ("bilinear", 1)])
def test_rotate_matches_pillow(interpolation: str, bound: int) -> None:
    imgs, x, sizes = _batch()
    angle = _params()["angle"]
    out = F.rotate(x.contiguous(memory_format=torch.channels_last), sizes, angle,
                   interpolation, fill=7)
    for b in range(B):
        got, h, w = _sample(out, sizes, b)
        ref = RG.rotate(imgs[b, :h, :w], float(angle[b]), interpolation, 7)
        assert int(np.abs(got - ref).max()) <= bound, b
    # quarter turns of squares and half turns are exact even with bilinear
    exact = [b for b in range(B) if float(angle[b]) % 180 == 0 or (
        float(angle[b]) % 90 == 0 and sizes[b, 0] == sizes[b, 1])]
    assert len(exact) >= 3
    for b in exact:
        got, h, w = _sample(out, sizes, b)
        assert np.array_equal(got, RG.rotate(imgs[b, :h, :w], float(angle[b]), interpolation, 7))


def test_bilinear_is_mostly_exact() -> None:
    """Pillow rounds in double, the kernel is exact on its 2**-32 px grid: they differ by one
    level in a handful of pixels (where Pillow's double lands just below an integer)."""
    imgs, x, sizes = _batch()
    p = _params()
    out = F.affine(x, sizes, p["angle"], p["translate"], p["scale"], p["shear"], "bilinear")
    off = total = 0
    for b in range(B):
        got, h, w = _sample(out, sizes, b)
        ref = RG.affine(imgs[b, :h, :w], float(p["angle"][b]), p["translate"][b].tolist(),
                        float(p["scale"][b]), p["shear"][b].tolist(), "bilinear")
        off += int((got != ref).sum())
        total += got.size
    assert off <= total // 100


def test_vflip_within_valid_height() -> None:
    imgs, x, sizes = _batch()
    flags = torch.tensor([True, False] * (B // 2))
    out = F.vflip(x, sizes, flags)
    for b in range(B):
        h, w = sizes[b].tolist()
        got = out[b, :, :h, :w].permute(1, 2, 0).numpy()
        assert np.array_equal(got, RG.vflip(imgs[b, :h, :w], bool(flags[b])))
        assert torch.equal(out[b, :, h:], x[b, :, h:])  # rows past the valid height stay


def test_the_accelerator_path_gives_the_same_pixels() -> None:
    _, x, sizes = _batch()
    p = _params()
    args = (x, sizes, p["angle"], p["translate"], p["scale"], p["shear"], "bilinear", 3)
    want = F.affine(*args)
    with accelerator_path():
        assert torch.equal(F.affine(*args), want)


def test_bad_arguments_in_one_line() -> None:
    _, x, sizes = _batch()
    p = _params()
    cases = [
        (lambda: F.affine(x, sizes, p["angle"], p["translate"], -p["scale"], p["shear"]),
         "scale must be positive"),
        (lambda: F.affine(x, sizes, p["angle"][:3], p["translate"], p["scale"], p["shear"]),
         r"angle must have shape \(12,\)"),
        (lambda: F.affine(x, sizes, p["angle"], p["translate"][:, :1], p["scale"], p["shear"]),
         r"translate must have shape \(12, 2\)"),
        (lambda: F.rotate(x, sizes, p["angle"], "bicubic"), "'nearest' or 'bilinear'"),
        (lambda: F.rotate(x, sizes, p["angle"], fill=300), "fill must be an int 0..255"),
        (lambda: F.rotate(x, sizes, p["angle"], fill=(1, 2)), "three of them"),
        (lambda: F.rotate(x, sizes, p["angle"] * float("nan")), "angle must be finite"),
        (lambda: F.rotate(x.float(), sizes, p["angle"]), "uint8"),
        (lambda: F.vflip(x, sizes, torch.ones(3, dtype=torch.bool)), r"flip_mask"),
    ]
    for call, message in cases:
        with pytest.raises(UserError, match=message) as info:
            call()
        assert "\n" not in str(info.value)


def test_the_kernels_keep_the_device_rules() -> None:
    """Down the CUDA/NPU path: no float64 tensor and no host sync (the maps are host tables
    made in numpy before the kernel runs)."""
    _, x, sizes = _batch()
    p = {k: v.float() for k, v in _params().items()}  # float32, as the transforms draw them
    for interpolation in ("nearest", "bilinear"):
        mode = audit(lambda i=interpolation: F.affine(
            x, sizes, p["angle"], p["translate"], p["scale"], p["shear"], i, 9))
        assert not mode.float64 and not set(mode.syncs) - {"Tensor.numpy"}, mode.summary()
    mode = audit(lambda: F.vflip(x, sizes, p["angle"] > 0))
    assert not mode.float64 and not mode.syncs, mode.summary()


@pytest.mark.slow
@pytest.mark.newest_torch
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_torch_compile_captures_the_warp_whole(interpolation: str) -> None:
    """``torch.compile(fullgraph=True)`` takes the warp kernel (the tables as inputs) in one
    graph, and the graph gives the eager pixels, traced (``aot_eager``) and as Inductor's
    generated code (what CUDA runs); the same for vflip."""
    import torch._dynamo

    from npu_data.transforms._dispatch import TABLE

    _, x, sizes = _batch()
    p = _params()
    args = F._warp_args(x, sizes, F.maps.affine_matrices(
        sizes.numpy(), p["angle"].numpy(), p["translate"].numpy(), p["scale"].numpy(),
        p["shear"].numpy()), interpolation, (1, 2, 3), None, None, "test")
    flags = p["angle"] > 0
    torch._dynamo.reset()
    try:
        with accelerator_path():
            got = torch.compile(TABLE["warp"].torch_ops, fullgraph=True)(*args)
            traced = torch.compile(TABLE["warp"].torch_ops, fullgraph=True,
                                   backend="aot_eager")(*args)
            flipped = torch.compile(TABLE["vflip"].torch_ops, fullgraph=True)(x, sizes, flags)
    finally:
        torch._dynamo.reset()
    assert torch.equal(got, TABLE["warp"].torch_ops(*args))
    assert torch.equal(traced, got)
    assert torch.equal(flipped, F.vflip(x, sizes, flags))
