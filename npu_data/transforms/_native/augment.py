"""The compiled CPU implementations of the augmentation kernels (``augment.cpp``, ``mixing.cpp``),
with the torch kernels' signatures (``transforms/_kernels``: ``warp``, ``pixel``, ``blur``,
``mixing``).

The per-sample tables (lookup tables, blend products, blur weights) are made by the torch
kernels' own functions; the compiled ops do the per-pixel passes with the same arithmetic, so
both backends give the same bytes.
"""

from __future__ import annotations

import torch

from npu_data.errors import UserValueError
from npu_data.transforms._kernels import blur, pixel
from npu_data.transforms._native.backend import _ops

_COLOR, _SHARPNESS = pixel.POLICY_OPS.index("Color"), pixel.POLICY_OPS.index("Sharpness")


def warp(images: torch.Tensor, sizes: torch.Tensor, out_sizes: torch.Tensor,
         tables: tuple[torch.Tensor, ...], bilinear: bool, fill: torch.Tensor) -> torch.Tensor:
    """A valid size outside the batch is a user error here (the op itself only asserts)."""
    h, w = images.shape[2], images.shape[3]
    sz = sizes.to(torch.int64)
    bad = (sz < 1).any(1) | (sz[:, 0] > h) | (sz[:, 1] > w)
    if bool(bad.any()):
        i = int(bad.to(torch.int64).argmax())
        raise UserValueError(f"warp: sample {i}'s valid size {sz[i].tolist()} is not inside "
                             f"the {h}x{w} batch — pass each image's own (height, width)")
    col_x, row_x, col_y, row_y = tables
    return _ops().warp(images, sizes, out_sizes, col_x, row_x, col_y, row_y, bilinear, fill)


def choose(mask: torch.Tensor, images: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    return _ops().choose(mask, images, others)


def mixup(images: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    return _ops().mixup(images, partner, lam)


def cutmix(images: torch.Tensor, partner: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    return _ops().cutmix(images, partner, boxes)


def soft_labels(labels: torch.Tensor, partner: torch.Tensor, weight: torch.Tensor,
                num_classes: int | None) -> torch.Tensor:
    return _ops().soft_labels(labels, partner, weight, num_classes)


def permute_channels(images: torch.Tensor, sizes: torch.Tensor, permutation: torch.Tensor
                     ) -> torch.Tensor:
    return _ops().permute_channels(images, permutation)


def vflip(images: torch.Tensor, sizes: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    return _ops().vflip(images, sizes, flip)


def erase(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, value: torch.Tensor
          ) -> torch.Tensor:
    return _ops().erase(images, boxes, value.to(torch.uint8))


def rgb_to_grayscale(images: torch.Tensor, sizes: torch.Tensor, mask: torch.Tensor
                     ) -> torch.Tensor:
    return _ops().rgb_to_grayscale(images, mask)


def _identity(batch: int, channels: int) -> torch.Tensor:
    return torch.arange(256, dtype=torch.uint8).view(1, 1, 256).expand(batch, channels, 256)


def _pixels(images: torch.Tensor, sizes: torch.Tensor, luts: torch.Tensor,
            prods: torch.Tensor | None = None, mode: torch.Tensor | None = None
            ) -> torch.Tensor:
    b = images.shape[0]
    prods = torch.zeros(b, 511) if prods is None else prods
    mode = torch.zeros(b, dtype=torch.int64) if mode is None else mode
    return _ops().policy_pixels(images, sizes, luts, prods, mode)


def lut_op(images: torch.Tensor, sizes: torch.Tensor, op: str,
           level: torch.Tensor | None = None) -> torch.Tensor:
    b, c = images.shape[:2]
    luts = pixel.lut_tables(op, b, c, images.device, level,
                            lambda: _ops().histograms(images, sizes))
    return _pixels(images, sizes, luts)


def adjust_sharpness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                     ) -> torch.Tensor:
    b, c = images.shape[:2]
    mode = torch.full((b,), 2, dtype=torch.int64)
    return _pixels(images, sizes, _identity(b, c), pixel.blend_products(factors), mode)


def policy_step(images: torch.Tensor, sizes: torch.Tensor, ops: torch.Tensor,
                factors: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    op = ops.to(torch.int64)
    prods = pixel.blend_products(factors.to(torch.float32))
    keys = _ops().contrast_keys(images, sizes) if pixel.present(op, "Contrast") else None
    hist = (_ops().histograms(images, sizes)
            if pixel.present(op, "AutoContrast", "Equalize") else None)
    luts = pixel.policy_luts(op, prods, levels.to(torch.int64), keys, hist, images.shape[1])
    mode = (op == _COLOR).to(torch.int64) + 2 * (op == _SHARPNESS).to(torch.int64)
    return _pixels(images, sizes, luts, prods, mode)


def gaussian_blur(images: torch.Tensor, sizes: torch.Tensor, kernel_size: tuple[int, int],
                  sigma: torch.Tensor) -> torch.Tensor:
    kx, ky = kernel_size
    return _ops().gaussian_blur(images, sizes, blur.kernel1d(kx, sigma), blur.kernel1d(ky, sigma))
