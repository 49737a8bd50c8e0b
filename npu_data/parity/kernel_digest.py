"""Fingerprints of the compiled CPU kernels' outputs on fixed inputs, one sha256 per case, so
two builds — x86-64 and aarch64, or the native, portable and scalar SIMD builds
(``NPU_DATA_SIMD``) — are proven to give the same bytes. The native x86-64 build is the one
``npu-data parity`` proves Pillow-exact; equal digests carry that proof over.

``python -m npu_data.parity.kernel_digest`` prints ``{"build": ..., "digests": {case: sha}}``.
Inputs come from numpy's PCG64 (the same numbers on every platform): noise, gradients and hard
edges; crops that enlarge and shrink, take either pass order, and end inside and on the 16-pixel
tiles of the transposes; each filter (bilinear, bicubic, Lanczos); the augmentation kernels
(warps through tables of fixed maps, histograms, contrast keys, each auto-augment pixel mode,
the blur with fixed weights, vflip, grayscale, erase, choose; MixUp on uint8 and float32, CutMix,
soft labels, channel permutation) on padded samples. Every input
is made with exact arithmetic only (no sin, cos or exp, whose last bit may differ between
platforms' libraries).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from npu_data.transforms import backends
from npu_data.transforms.backends import (
    bilinear_tables,
    blend_products,
    nearest_tables,
    normalize_table,
    vertical_first_rule,
)

# (top, left, height, width) -> (out_h, out_w): shrink 4x, enlarge, one axis each way, odd sizes
_CROPS = [((0, 0, 300, 400), (224, 224)), ((13, 7, 257, 91), (61, 37)),
          ((40, 3, 33, 17), (224, 224)), ((1, 2, 299, 398), (64, 300)),
          ((5, 9, 280, 60), (31, 300)), ((100, 200, 16, 16), (16, 16))]


# windows of whole resizes (ResizeCrop): box -> (full_h, full_w), window (top, left, out_h, out_w)
_WINDOWS = [((0, 0, 300, 400), (250, 333), (10, 50, 224, 224)),
            ((13, 7, 257, 91), (512, 181), (100, 5, 224, 160)),
            ((0, 0, 300, 400), (1024, 1365), (400, 600, 64, 300))]


def _images(rng: np.random.Generator, b: int, h: int, w: int) -> torch.Tensor:
    noise = rng.integers(0, 256, size=(b, 3, h, w), dtype=np.uint8)
    ramp = np.broadcast_to((np.arange(w) * 255 // max(w - 1, 1)).astype(np.uint8), (h, w))
    noise[0, 0] = ramp  # a gradient
    noise[0, 1] = np.where((np.arange(h)[:, None] // 7 + np.arange(w)[None] // 5) % 2, 255, 0)
    noise[-1] = noise[-1] // 64 * 85  # few levels: flat areas, hard edges, grey pixels
    return torch.from_numpy(noise.copy())


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:20]


def _crop_cases(ops: Any, images: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    rule = vertical_first_rule()
    hwc = list(images.permute(0, 2, 3, 1).contiguous())  # interleaved, as a memory map gives
    for (box, (oh, ow)) in _CROPS:
        boxes = torch.tensor([box] * images.shape[0], dtype=torch.int64)
        yield f"resized_crop {box}->{oh}x{ow}", ops.resized_crop(images, boxes, oh, ow, rule)
        out = torch.empty(images.shape[0], 3, oh, ow, dtype=torch.uint8)
        ops.resized_crop_list(hwc, boxes, oh, ow, rule, out)
        yield f"resized_crop_list {box}->{oh}x{ow}", out
    for box, (fh, fw), (top, left, oh, ow) in _WINDOWS:
        boxes = torch.tensor([box] * images.shape[0], dtype=torch.int64)
        windows = torch.tensor([[top, left, fh, fw]] * images.shape[0], dtype=torch.int64)
        yield (f"resized_crop window {box}->{fh}x{fw} at {top},{left}",
               ops.resized_crop(images, boxes, oh, ow, rule, windows))
        out = torch.empty(images.shape[0], 3, oh, ow, dtype=torch.uint8)
        ops.resized_crop_list(hwc, boxes, oh, ow, rule, out, windows)
        yield f"resized_crop_list window {box}->{fh}x{fw} at {top},{left}", out
    for flt, name in ((1, "bicubic"), (2, "lanczos")):  # negative lobes: the clip to 0..255
        for box, (oh, ow) in (_CROPS[1], _CROPS[2]):
            boxes = torch.tensor([box] * images.shape[0], dtype=torch.int64)
            yield (f"resized_crop {name} {box}->{oh}x{ow}",
                   ops.resized_crop(images, boxes, oh, ow, rule, None, flt))
        box, (fh, fw), (top, left, oh, ow) = _WINDOWS[1]
        boxes = torch.tensor([box] * images.shape[0], dtype=torch.int64)
        windows = torch.tensor([[top, left, fh, fw]] * images.shape[0], dtype=torch.int64)
        out = torch.empty(images.shape[0], 3, oh, ow, dtype=torch.uint8)
        ops.resized_crop_list(hwc, boxes, oh, ow, rule, out, windows, flt)
        yield f"resized_crop_list {name} window {box}->{fh}x{fw} at {top},{left}", out


def _colour_cases(ops: Any, images: torch.Tensor, rng: np.random.Generator
                  ) -> Iterator[tuple[str, torch.Tensor]]:
    b = images.shape[0]
    sizes = torch.tensor([[images.shape[2] - 3 * i, images.shape[3] - 5 * i] for i in range(b)],
                         dtype=torch.int64)  # padded samples: only the valid area changes
    factors = torch.from_numpy(rng.uniform(0.0, 2.0, size=(b, 3)).astype(np.float32))  # b, c, s
    shifts = torch.from_numpy(rng.integers(-128, 128, size=b).astype(np.int64))
    for op, name in enumerate(("brightness", "contrast", "saturation", "hue")):
        order = torch.full((b, 1), op, dtype=torch.int64)
        yield name, ops.color_ops(images, sizes, order, factors, shifts)
    order = torch.from_numpy(np.stack([rng.permutation(4) for _ in range(b)]).astype(np.int64))
    yield "color_ops random order", ops.color_ops(images, sizes, order, factors, shifts)
    inplace = images.clone()
    ops.color_ops_(inplace, sizes, order, factors, shifts)
    yield "color_ops_ in place", inplace
    flip = torch.tensor([i % 2 == 0 for i in range(b)])
    yield "hflip", ops.hflip(images, sizes, flip)
    flipped = images.clone()
    ops.hflip_(flipped, sizes, flip)
    yield "hflip_ in place", flipped
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    for dtype in (torch.float32, torch.bfloat16):
        table = normalize_table(mean, std, dtype)
        for channels_last in (False, True):
            yield (f"normalize {str(dtype).removeprefix('torch.')} channels_last={channels_last}",
                   ops.normalize(images, table, channels_last))


# inverse maps (Pillow's six coefficients): a shear with a shift, a 2x zoom, a quarter turn
# with a 0.75 scale, a mirror; exact binary fractions, so the tables are the same everywhere
_MAPS = [(1.0, 0.25, -3.5, 0.0, 1.0, 2.0), (0.5, 0.0, 40.0, 0.0, 0.5, 30.0),
         (0.0, -0.75, 250.0, 0.75, 0.0, -20.0), (-1.0, 0.0, 399.0, 0.125, 1.0, 0.0)]


def _augment_cases(ops: Any, images: torch.Tensor, rng: np.random.Generator
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    b, c, h, w = images.shape
    sizes = torch.tensor([[h - 3 * i, w - 5 * i] for i in range(b)], dtype=torch.int64)
    m = np.array([_MAPS[i % len(_MAPS)] for i in range(b)], dtype=np.float64)
    fill = torch.tensor([7, 128, 250], dtype=torch.uint8)
    for name, tables in (("nearest", nearest_tables(m, 224, 160)),
                         ("bilinear", bilinear_tables(m, 224, 160))):
        out_sizes = torch.tensor([[224 - i, 160 - 2 * i] for i in range(b)], dtype=torch.int64)
        yield (f"warp {name} 224x160", ops.warp(images, sizes, out_sizes,
               *(torch.from_numpy(t) for t in tables), name == "bilinear", fill))
    yield "histograms", ops.histograms(images, sizes)
    yield "contrast_keys", ops.contrast_keys(images, sizes)
    luts = torch.from_numpy(rng.integers(0, 256, size=(b, c, 256), dtype=np.uint8))
    prods = blend_products(torch.from_numpy(rng.uniform(0.0, 2.0, b).astype(np.float32)))
    for mode, name in enumerate(("table", "Color", "Sharpness")):
        modes = torch.full((b,), mode, dtype=torch.int64)
        yield f"policy_pixels {name}", ops.policy_pixels(images, sizes, luts, prods, modes)
    flags = torch.tensor([i % 2 == 0 for i in range(b)])
    yield "vflip", ops.vflip(images, sizes, flags)
    yield "rgb_to_grayscale", ops.rgb_to_grayscale(images, flags)
    boxes = torch.tensor([[-3, 10, 50, 500], [100, -7, 400, 30], [5, 5, 0, 9], [280, 390, 9, 9]],
                         dtype=torch.int64)[torch.arange(b) % 4]
    yield "erase", ops.erase(images, boxes, luts[:, :, 0])
    yield "choose", ops.choose(flags, images, images.flip(0))
    partner = torch.arange(b).roll(1)
    lam = torch.tensor([0.0, 0.5, 0.3125, 0.9], dtype=torch.float32)[torch.arange(b) % 4]
    yield "mixup uint8", ops.mixup(images, partner, lam)
    yield "mixup float32", ops.mixup(images.to(torch.float32) / 255, partner, lam)
    yield "cutmix", ops.cutmix(images, partner, boxes)
    yield "soft_labels", ops.soft_labels(torch.arange(b) % 3, partner, lam, 5)
    perms = torch.tensor([[2, 0, 1], [0, 1, 2], [1, 2, 0], [2, 1, 0]])[torch.arange(b) % 4]
    yield "permute_channels", ops.permute_channels(images, perms)
    for kx, ky in ((1, 3), (9, 5), (23, 23)):
        wx = rng.integers(1, 1000, size=(b, kx)).astype(np.float32)
        wy = rng.integers(1, 1000, size=(b, ky)).astype(np.float32)
        wx, wy = wx / wx.sum(1, keepdims=True), wy / wy.sum(1, keepdims=True)
        yield (f"gaussian_blur {kx}x{ky}",
               ops.gaussian_blur(images, sizes, torch.from_numpy(wx), torch.from_numpy(wy)))


def digests(seed: int = 0) -> dict[str, str]:
    """The sha256 (first 20 hex digits) of each case's output bytes with the loaded build.

    Raises:
        RuntimeError: the compiled kernels are not available here.
    """
    ops = backends.compiled_ops()
    if ops is None:
        raise RuntimeError("the compiled CPU kernels are not available (see the warning above)")
    rng = np.random.default_rng(seed)
    images = _images(rng, 4, 300, 400)
    cases = list(_crop_cases(ops, images)) + list(_colour_cases(ops, images, rng))
    cases += list(_augment_cases(ops, images, rng))
    return {name: _sha(out) for name, out in cases}


def main() -> int:
    torch.set_num_threads(1)
    build = backends.simd_paths() or "unavailable"
    try:
        found = digests()
    except RuntimeError as exc:
        print(f"npu-data kernel_digest: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"build": build, "digests": found}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
