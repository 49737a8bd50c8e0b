"""The torch ``resized_crop``: per-sample crop boxes through Pillow's two resize passes.

Pillow >= 13 runs the vertical pass first when the height shrinks by more than twice as many
pixels as the width (:func:`vertical_first`). With boxes on the host (:func:`host_values`)
each sample runs its own order once, in two groups known on the host; with boxes on the
device both orders run for every sample and each keeps its own (nothing is read back).
"""

from __future__ import annotations

import numpy as np
import torch

from npu_data.errors import UserError
from npu_data.transforms._kernels import host_values, to_device
from npu_data.transforms._kernels.resample import (
    Tables,
    resize_two_passes,
    vertical_first_rule,
    window_support,
    window_tables,
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
        raise UserError(f"crop box {bx[i].tolist()} of sample {i} (top, left, height, width) "
                        f"lies outside the {height}x{width} batch: clip it to the image")


def _passes(images: torch.Tensor, bx: torch.Tensor, out_h: int, out_w: int,
            vertical: bool, tables: tuple[Tables, Tables] | None = None) -> torch.Tensor:
    """Both passes on every sample of the batch, horizontal or ``vertical`` first: integer
    tap sums over gathered rows (``_kernels.resample``); ``tables``: the (rows, columns)
    coefficients of windows (:func:`window_pass_tables`)."""
    top, left, ch, cw = bx.unbind(1)
    hwc = images.permute(0, 2, 3, 1)  # (B, H, W, C): free for channels-last batches
    if vertical:  # rows of H first, then the columns: (B, out_w, out_h, C)
        z = resize_two_passes(hwc, (top, ch, out_h), (left, cw, out_w), tables)
        return z.permute(0, 3, 2, 1).contiguous()
    flipped = None if tables is None else (tables[1], tables[0])
    z = resize_two_passes(hwc.transpose(1, 2), (left, cw, out_w), (top, ch, out_h), flipped)
    return z.permute(0, 3, 1, 2).contiguous()


def window_regions(boxes: np.ndarray, windows: np.ndarray, out_h: int, out_w: int
                   ) -> np.ndarray:
    """(B, 4) int64 (top, left, height, width): the pixels each window reads, in the image's
    coordinates (the box's origin plus the rows and columns its coefficients touch; height
    or width 0 where the window lies wholly in the padding)."""
    rows = window_support(boxes[:, 2], windows[:, 2], windows[:, 0], out_h)
    cols = window_support(boxes[:, 3], windows[:, 3], windows[:, 1], out_w)
    return np.stack([boxes[:, 0] + rows[:, 0], boxes[:, 1] + cols[:, 0],
                     rows[:, 1] - rows[:, 0], cols[:, 1] - cols[:, 0]], axis=1)


def check_windows_inside(boxes: np.ndarray, windows: np.ndarray, out_h: int, out_w: int,
                         height: int, width: int) -> None:
    """Refuse a window that reads outside the ``height x width`` images (its box may extend
    past them — a region decoded alone — as long as the pixels it reads are inside)."""
    reg = window_regions(boxes, windows, out_h, out_w)
    empty = (reg[:, 2] == 0) | (reg[:, 3] == 0)
    inside = empty | ((reg[:, 0] >= 0) & (reg[:, 1] >= 0) & (reg[:, 0] + reg[:, 2] <= height)
                      & (reg[:, 1] + reg[:, 3] <= width))
    if not inside.all():
        i = int(np.flatnonzero(~inside)[0])
        raise UserError(f"crop window {windows[i].tolist()} of box {boxes[i].tolist()} (sample "
                        f"{i}) reads pixels outside the {height}x{width} batch: clip the box to "
                        "the image")


def _window_order(boxes: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """(B,) bool: Pillow's pass order for resizing each whole box to its window's full size
    (the rule of :func:`vertical_first` on the full resize), from host arrays."""
    if not vertical_first_rule():
        return np.zeros(len(boxes), dtype=bool)
    dh, dw = boxes[:, 2] - windows[:, 2], boxes[:, 3] - windows[:, 3]
    return (dh > 0) & (dh > 2 * dw)


def window_pass_tables(boxes: torch.Tensor, windows: torch.Tensor, out_h: int, out_w: int,
                       device: torch.device) -> tuple[Tables, Tables]:
    """Host-made (rows, columns) coefficients of each sample's window: the box resized to
    ``(full_h, full_w)``, outputs ``[top, top + out_h) x [left, left + out_w)`` kept."""
    rows = window_tables(boxes[:, 2], windows[:, 2], windows[:, 0], out_h, device)
    cols = window_tables(boxes[:, 3], windows[:, 3], windows[:, 1], out_w, device)
    return rows, cols


def resized_window(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                   windows: torch.Tensor, out_h: int, out_w: int) -> torch.Tensor:
    """Each sample's box resized whole to ``windows[:, 2:]`` (Pillow's pass order for that
    resize), then the ``out_h x out_w`` window at ``windows[:, :2]`` kept (0 outside the
    resized image). ``boxes`` and ``windows`` (B, 4) int64 on the host (the coefficient
    tables are made there, in float64)."""
    if not (boxes.is_cpu and windows.is_cpu):
        raise UserError("resized_crop: windows and their boxes must be host (CPU) tensors: "
                        "their coefficient tables are made on the host")
    # the tables and pass orders are made from the host parameters (numpy, no aten op)
    bn, wn = boxes.numpy(), windows.numpy()
    check_windows_inside(bn, wn, out_h, out_w, images.shape[-2], images.shape[-1])
    order = _window_order(bn, wn)
    bx = to_device(boxes, images.device)
    out = images.new_empty((images.shape[0], images.shape[1], out_h, out_w))
    for vertical in (False, True):  # each sample its own order, once: at most two groups
        pick = np.flatnonzero(order == vertical)
        if not len(pick):
            continue
        tables = window_pass_tables(torch.from_numpy(bn[pick]), torch.from_numpy(wn[pick]),
                                    out_h, out_w, images.device)
        if len(pick) == len(order):
            return _passes(images, bx, out_h, out_w, vertical, tables)
        idx = to_device(torch.from_numpy(pick), images.device)
        part = _passes(images.index_select(0, idx), bx.index_select(0, idx), out_h, out_w,
                       vertical, tables)
        out.index_copy_(0, idx, part)
    return out


def resized_crop(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor,
                 out_h: int, out_w: int, windows: torch.Tensor | None = None) -> torch.Tensor:
    """``boxes (B, 4)`` int64 (top, left, height, width) on the host or the images' device;
    ``windows``: see :func:`resized_window`."""
    if windows is not None:
        return resized_window(images, sizes, boxes, windows, out_h, out_w)
    bx = to_device(boxes, images.device)
    if not host_values(boxes):
        # each sample's pass order is on the device: both orders, each picked per sample (no
        # read back; a box outside the batch reads clamped rows)
        v_first = vertical_first(bx, out_h, out_w)
        hv = _passes(images, bx, out_h, out_w, vertical=False)
        vh = _passes(images, bx, out_h, out_w, vertical=True)
        return torch.where(v_first.view(-1, 1, 1, 1), vh, hv).contiguous()
    check_boxes_inside(boxes, images)  # host boxes: checked and read whatever the device
    order = vertical_first(boxes, out_h, out_w).numpy()
    if not order.any() or order.all():
        return _passes(images, bx, out_h, out_w, vertical=bool(order.any()))
    out = images.new_empty((images.shape[0], images.shape[1], out_h, out_w))
    for vertical in (False, True):  # each sample its own order, once: two groups
        idx = to_device(torch.from_numpy(np.flatnonzero(order == vertical)), images.device)
        part = _passes(images.index_select(0, idx), bx.index_select(0, idx), out_h, out_w,
                       vertical=vertical)
        out.index_copy_(0, idx, part)
    return out
