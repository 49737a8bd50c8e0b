"""The torch ``resized_crop``: per-sample crop boxes through Pillow's two resize passes
(bilinear, bicubic or Lanczos: the filter picks the host tables).

Pillow >= 13 runs the vertical pass first when the height shrinks by more than twice as many
pixels as the width (:func:`vertical_first`). The tables of both axes are gathered per sample
where the boxes live (the host for the DataLoader's boxes: nothing is read back from the
device), a flip is folded into the width axis's tables, and
:func:`~npu_data.transforms._kernels.resample.resample_batch` runs every sample in its own
pass order at once. Windows of whole resizes (``ResizeCrop``: resize, then crop) run the same
way, from host tables of Pillow's coefficients for the kept outputs (:func:`resized_window`).
"""

from __future__ import annotations

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms._kernels import host_values, to_device
from npu_data.transforms._kernels.resample import (
    Axis,
    Bounds,
    extent_tables,
    resample_batch,
    taps_needed,
    vertical_first_rule,
    window_axis,
    window_support,
)


def vertical_first(boxes: torch.Tensor, out_h: int, out_w: int) -> torch.Tensor:
    """(B,) bool: the samples Pillow >= 13 resizes vertically first (the height shrinks by
    more than twice as many pixels as the width)."""
    ch, cw = boxes[:, 2], boxes[:, 3]
    if not vertical_first_rule():
        return torch.zeros_like(ch, dtype=torch.bool)
    return ((ch - out_h) > 0) & ((ch - out_h) > 2 * (cw - out_w))


def check_boxes_inside(boxes: torch.Tensor, images: torch.Tensor) -> None:
    """Refuse a host box that leaves the padded batch (one line naming the sample)."""
    height, width = images.shape[-2:]
    bx = boxes
    inside = (bx[:, 0] >= 0) & (bx[:, 1] >= 0) & (bx[:, 2] >= 1) & (bx[:, 3] >= 1) & \
        (bx[:, 0] + bx[:, 2] <= height) & (bx[:, 1] + bx[:, 3] <= width)
    if not bool(inside.all()):
        i = int(torch.nonzero(~inside)[0, 0])
        raise UserValueError(f"crop box {bx[i].tolist()} of sample {i} (top, left, height, width) "
                             f"lies outside the {height}x{width} batch: clip it to the image")


def crop_bounds(height: int, width: int, out_h: int, out_w: int,
                interpolation: str = "bilinear") -> Bounds:
    """The longest axes and tap counts any crop of a ``height`` x ``width`` batch can need in
    each pass (a vertical-first crop is narrow: its width is below ``(ch - out_h) / 2 +
    out_w``)."""
    first, second = width, height
    taps1 = taps_needed(width, out_w, interpolation)
    taps2 = taps_needed(height, out_h, interpolation)
    if vertical_first_rule() and height > out_h:
        narrow = min(width, (height - out_h + 1) // 2 + out_w)
        first, second = max(first, height), max(second, narrow)
        taps1 = max(taps1, taps_needed(height, out_h, interpolation))
        taps2 = max(taps2, taps_needed(narrow, out_w, interpolation))
    return Bounds(first, second, taps1, taps2)


def crop_axes(boxes: torch.Tensor, height: int, width: int, out_h: int, out_w: int,
              flip: torch.Tensor | None = None, interpolation: str = "bilinear"
              ) -> tuple[Axis, Axis]:
    """The (rows, cols) resampling tables of ``boxes`` (B, 4) (top, left, height, width) in a
    ``height`` x ``width`` batch, on the boxes' device; ``flip`` (B,) mirrors those samples."""
    bx = boxes.to(torch.int64)
    top, left = bx[:, 0].clamp(0, height - 1), bx[:, 1].clamp(0, width - 1)
    ch = torch.minimum(bx[:, 2].clamp(min=1), height - top)  # device boxes are not checked:
    cw = torch.minimum(bx[:, 3].clamp(min=1), width - left)  # keep their reads inside
    rx, rw = extent_tables(ch, out_h, height, interpolation)
    cx, cwt = extent_tables(cw, out_w, width, interpolation)
    cols = Axis(left, cw, cx, cwt)
    if flip is not None:
        cols = cols.flipped(flip.to(torch.bool))
    return Axis(top, ch, rx, rw), cols


def window_regions(boxes: np.ndarray, windows: np.ndarray, out_h: int, out_w: int,
                   interpolation: str = "bilinear") -> np.ndarray:
    """(B, 4) int64 (top, left, height, width): the pixels each window reads, in the image's
    coordinates (the box's origin plus the rows and columns its coefficients touch, wider
    for a wider filter; height or width 0 where the window lies wholly in the padding)."""
    rows = window_support(boxes[:, 2], windows[:, 2], windows[:, 0], out_h, interpolation)
    cols = window_support(boxes[:, 3], windows[:, 3], windows[:, 1], out_w, interpolation)
    return np.stack([boxes[:, 0] + rows[:, 0], boxes[:, 1] + cols[:, 0],
                     rows[:, 1] - rows[:, 0], cols[:, 1] - cols[:, 0]], axis=1)


def check_windows_inside(boxes: np.ndarray, windows: np.ndarray, out_h: int, out_w: int,
                         height: int | np.ndarray, width: int | np.ndarray,
                         interpolation: str = "bilinear") -> None:
    """Refuse a window that reads outside the ``height x width`` images (ints, or (B,) arrays
    of each image's; its box may extend past them — a region decoded alone — as long as the
    pixels it reads are inside)."""
    reg = window_regions(boxes, windows, out_h, out_w, interpolation)
    empty = (reg[:, 2] == 0) | (reg[:, 3] == 0)
    inside = empty | ((reg[:, 0] >= 0) & (reg[:, 1] >= 0) & (reg[:, 0] + reg[:, 2] <= height)
                      & (reg[:, 1] + reg[:, 3] <= width))
    if not inside.all():
        i = int(np.flatnonzero(~inside)[0])
        h = int(np.broadcast_to(height, inside.shape)[i])
        w = int(np.broadcast_to(width, inside.shape)[i])
        raise UserValueError(
            f"crop window {windows[i].tolist()} of box {boxes[i].tolist()} (sample "
            f"{i}) reads pixels outside the {h}x{w} "
            f"{'batch' if np.ndim(height) == 0 else 'image'}: clip the box to the image"
        )


def _window_order(boxes: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """(B,) bool: Pillow's pass order for resizing each whole box to its window's full size
    (the rule of :func:`vertical_first` on the full resize), from host arrays."""
    if not vertical_first_rule():
        return np.zeros(len(boxes), dtype=bool)
    dh, dw = boxes[:, 2] - windows[:, 2], boxes[:, 3] - windows[:, 3]
    return (dh > 0) & (dh > 2 * dw)


def resized_window(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                   windows: torch.Tensor, out_h: int, out_w: int,
                   interpolation: str = "bilinear") -> torch.Tensor:
    """Each sample's box resized whole to ``windows[:, 2:]`` (Pillow's pass order for that
    resize), then the ``out_h x out_w`` window at ``windows[:, :2]`` kept (0 outside the
    resized image): one :func:`resample_batch` with host tables. ``boxes`` and ``windows``
    (B, 4) int64 on the host (the coefficient tables are made there, in float64)."""
    if not (boxes.is_cpu and windows.is_cpu):
        raise UserValueError("resized_crop: windows and their boxes must be host (CPU) tensors: "
                             "their coefficient tables are made on the host")
    # the tables and pass orders are made from the host parameters (numpy, no aten op)
    bn, wn = boxes.numpy(), windows.numpy()
    height, width = images.shape[-2:]
    check_windows_inside(bn, wn, out_h, out_w, height, width, interpolation)
    rows = window_axis(bn[:, 0], bn[:, 2], wn[:, 2], wn[:, 0], out_h, height, interpolation)
    cols = window_axis(bn[:, 1], bn[:, 3], wn[:, 3], wn[:, 1], out_w, width, interpolation)
    vertical = torch.from_numpy(_window_order(bn, wn))
    x = images.permute(0, 2, 3, 1)  # (B, H, W, C): free for channels-last batches
    if not x.is_contiguous():
        x = x.contiguous()
    clip = interpolation != "bilinear"
    return resample_batch(x, rows, cols, vertical, clip=clip).permute(0, 3, 1, 2)


def resized_crop(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                 out_h: int, out_w: int, flip: torch.Tensor | None = None,
                 windows: torch.Tensor | None = None, interpolation: str = "bilinear"
                 ) -> torch.Tensor:
    """``boxes (B, 4)`` int64 (top, left, height, width) on the host or the images' device;
    ``flip`` (B,) bool mirrors those samples' results; ``windows``: see
    :func:`resized_window` (no ``flip`` with them); ``interpolation``: a name of
    ``resample.FILTERS``. Returns (B, C, out_h, out_w) uint8 in channels-last memory."""
    if windows is not None:
        if flip is not None:
            raise UserValueError("resized_crop: flip= is not folded into windows; flip after")
        return resized_window(images, sizes, boxes, windows, out_h, out_w, interpolation)
    if host_values(boxes):
        check_boxes_inside(boxes, images)  # host boxes: checked and read whatever the device
    height, width = images.shape[-2:]
    if flip is not None and flip.device != boxes.device:  # tables where both are
        boxes, flip = to_device(boxes, images.device), to_device(flip, images.device)
    rows, cols = crop_axes(boxes, height, width, out_h, out_w, flip, interpolation)
    vertical = vertical_first(boxes.to(torch.int64), out_h, out_w)
    x = images.permute(0, 2, 3, 1)  # (B, H, W, C): free for channels-last batches
    if not x.is_contiguous():
        x = x.contiguous()
    bounds = crop_bounds(height, width, out_h, out_w, interpolation)
    clip = interpolation != "bilinear"
    return resample_batch(x, rows, cols, vertical, bounds, clip).permute(0, 3, 1, 2)


def resized_crop_list(images: list[torch.Tensor], boxes: torch.Tensor, out: torch.Tensor,
                      windows: torch.Tensor | None = None, interpolation: str = "bilinear"
                      ) -> torch.Tensor:
    """:func:`resized_crop` of ``(H, W, C)`` images of different sizes into ``out (B, C, h,
    w)``, one sample at a time (a reader's list: memory-map views, decoded regions)."""
    out_h, out_w = int(out.shape[2]), int(out.shape[3])
    for i, t in enumerate(images):
        sizes = torch.tensor([[t.shape[0], t.shape[1]]], dtype=torch.int64)
        out[i] = resized_crop(t.permute(2, 0, 1)[None], sizes, boxes[i:i + 1], out_h, out_w,
                              windows=None if windows is None else windows[i:i + 1],
                              interpolation=interpolation)[0]
    return out
