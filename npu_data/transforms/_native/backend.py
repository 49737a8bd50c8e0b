"""The compiled CPU implementations behind :mod:`npu_data.transforms.functional`.

Thin wrappers of ``torch.ops.npu_data.*`` with the torch implementations' signatures
(``transforms/_kernels``); :mod:`npu_data.transforms._dispatch` picks them for CPU tensors
when the library loads. The colour ops are all ``color_ops``: one op id per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from npu_data.transforms import _native
from npu_data.transforms._kernels.crop import check_boxes_inside, check_windows_inside
from npu_data.transforms._kernels.layout import normalize_table
from npu_data.transforms._kernels.resample import FILTERS, vertical_first_rule


def _ops() -> Any:
    ops = _native.ops()
    if ops is None:  # _dispatch picks this backend only where the library loaded
        raise RuntimeError("npu-data: the compiled CPU kernels are not loaded")
    return ops


def resized_crop(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                 out_h: int, out_w: int, flip: torch.Tensor | None = None,
                 windows: torch.Tensor | None = None, interpolation: str = "bilinear"
                 ) -> torch.Tensor:
    bx = boxes.to(images.device)
    flt = FILTERS[interpolation]
    if windows is None:
        check_boxes_inside(bx, images)  # the kernel reads the boxes' rows unchecked
        out = _ops().resized_crop(images, bx, out_h, out_w, vertical_first_rule(), None, flt)
    else:
        check_windows_inside(bx.numpy(), windows.numpy(), out_h, out_w, images.shape[-2],
                             images.shape[-1], interpolation)
        out = _ops().resized_crop(images, bx, out_h, out_w, vertical_first_rule(),
                                  windows.to(images.device), flt)
    if flip is None:
        return out
    out_sizes = torch.tensor([out_h, out_w], dtype=torch.int64).repeat(out.shape[0], 1)
    return hflip(out, out_sizes, flip, inplace=out.is_contiguous())


def resized_crop_list(images: list[torch.Tensor], boxes: torch.Tensor, out: torch.Tensor,
                      windows: torch.Tensor | None = None, interpolation: str = "bilinear"
                      ) -> torch.Tensor:
    """The list form: every ``(H, W, C)`` image's box into ``out`` in one call (a window
    that reads outside its image is refused first: the kernel would leave it 0)."""
    out_h, out_w = int(out.shape[2]), int(out.shape[3])
    if windows is not None and len(images):
        hw = np.array([im.shape[:2] for im in images], dtype=np.int64)
        check_windows_inside(boxes.numpy(), windows.numpy(), out_h, out_w, hw[:, 0], hw[:, 1],
                             interpolation)
    _ops().resized_crop_list(images, boxes, out_h, out_w, vertical_first_rule(), out, windows,
                             FILTERS[interpolation])
    return out


def hflip(images: torch.Tensor, sizes: torch.Tensor, flip: torch.Tensor,
          inplace: bool = False) -> torch.Tensor:
    """``inplace``: ``images`` (contiguous) may take the result (``transforms.base.donated``)."""
    if inplace:
        _ops().hflip_(images, sizes, flip.to(torch.bool))
        return images
    return _ops().hflip(images, sizes, flip.to(torch.bool))


def color_jitter(images: torch.Tensor, sizes: torch.Tensor, ops: Sequence[int],
                 order: torch.Tensor | None, factors: torch.Tensor, shifts: torch.Tensor,
                 inplace: bool = False, full: bool | None = None) -> torch.Tensor:
    b = images.shape[0]
    if order is None:
        order = torch.tensor(list(ops), dtype=torch.int64).view(1, -1).expand(b, len(ops))
    args = (sizes.to(torch.int64), order.to(torch.int64), factors.to(torch.float32),
            shifts.to(torch.int64))
    if inplace and images.shape[1] == 3:  # ``images`` (contiguous) takes the result
        _ops().color_ops_(images, *args)
        return images
    return _ops().color_ops(images, *args)


def _single(op: int, images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor,
            shifts: torch.Tensor | None = None) -> torch.Tensor:
    b = images.shape[0]
    order = torch.full((b, 1), op, dtype=torch.int64)
    shift = shifts if shifts is not None else torch.zeros(b, dtype=torch.int64)
    return color_jitter(images, sizes, (op,), order, factors.view(-1, 1).expand(b, 3), shift)


def adjust_brightness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    return _single(0, images, sizes, factors)


def adjust_contrast(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                    ) -> torch.Tensor:
    return _single(1, images, sizes, factors)


def adjust_saturation(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    return _single(2, images, sizes, factors)


def adjust_hue(images: torch.Tensor, sizes: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    return _single(3, images, sizes, torch.ones(images.shape[0]), shifts)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype,
              channels_last: bool) -> torch.Tensor:
    """One pass through the torch kernel's table (built on the host with its float ops)."""
    return _ops().normalize(images, normalize_table(mean, std, dtype), channels_last)
