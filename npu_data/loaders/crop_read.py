"""Crop at read, where a batch is read: its ``CropPlan`` (``transforms.read_crop``) applied to
the images as they come from the source, and the mark the batch then carries.

One function for every source (:func:`crop_batch`): a ``ShardDataset``'s batch (collated from
its columns, ``collate_columns``: zero-copy views of the memory map for raw shards, JPEG
bytes for encoded ones) and a stream's (``stream_crop``: JPEG bytes from the tar). A JPEG is
decoded only in its box, or in the pixels its window reads (:func:`decode_boxes`,
libjpeg-turbo: the pixels of a full decode); every box is then resized straight into the
batch buffer and the geometry moved with it — the values of collating the full images and
cropping after. The batch is marked :class:`Cropped` with its stored sizes: the DataLoader
takes the mark off (:func:`take`), draws the whole pipeline's parameters from those sizes
(:func:`stored_sizes`: ``batch["aug"]`` unchanged) and runs the rest of the pipeline.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data import codecs
from npu_data.buffers import reused_scratch
from npu_data.common.batch import CropPlan, EncodedImage
from npu_data.errors import UserError
from npu_data.transforms import read_crop

STORED_KEY = "__stored_sizes__"  # in a batch cropped while read: its Cropped mark


@dataclass(frozen=True)
class Cropped:
    """The mark of a batch cropped while read: its samples' stored ``sizes (B, 2)`` (height,
    width) and the seed and epoch its boxes were drawn with."""

    sizes: np.ndarray
    seed: int
    epoch: int


def crop_batch(batch: dict[str, Any], images: Sequence[Any], plan: CropPlan,
               buffer: Callable[[dict[str, Any], tuple[int, ...]], torch.Tensor]
               ) -> dict[str, Any]:
    """A batch collated at its stored ``sizes`` (``image`` not set) through ``plan``: the
    geometry moved, ``sizes`` the output size, the image ``buffer(batch, (B, 3, h, w))``
    (the collate's: shared memory in a worker, pinned, or pooled) filled by
    :func:`crop_images`; marked :class:`Cropped`."""
    stored = batch["sizes"].numpy().copy()
    cropped = read_crop.crop_geometry(batch, plan)
    image = buffer(cropped, (len(images), 3, *plan.size))
    crop_images(images, plan, image)
    cropped["image"] = image
    cropped[STORED_KEY] = Cropped(stored, plan.seed, plan.epoch)
    return cropped


def crop_images(images: Sequence[Any], plan: CropPlan, out: torch.Tensor) -> None:
    """Each image's box resized into ``out (B, 3, h, w)`` (contiguous): ``(H, W, 3)``
    arrays, or ``EncodedImage`` JPEGs of which only the box, or the pixels its window reads,
    is decoded (:func:`decode_boxes`; ``plan.fast``: DCT-scaled where the box is at least
    twice the output)."""
    boxes = torch.from_numpy(np.ascontiguousarray(plan.boxes, dtype=np.int64))
    if any(isinstance(im, EncodedImage) for im in images):
        images, boxes = decode_boxes(images, boxes, plan.size if plan.fast else None,
                                     reuse=True, regions=read_crop.read_regions(plan))
    read_crop.resize_into(images, boxes, out, plan.windows, plan.interpolation)


def stored_sizes(batch: Any, seed: int, epoch: int) -> np.ndarray | None:
    """The stored sizes of a batch cropped while read (None for any other batch); its boxes
    must have been drawn with this pass's seed and epoch."""
    mark = batch.get(STORED_KEY) if isinstance(batch, Mapping) else None
    if not isinstance(mark, Cropped):
        return None
    if (mark.seed, mark.epoch) != (seed, epoch):
        raise UserError(
            f"crop at read: a batch's crops were drawn for seed {mark.seed}, epoch {mark.epoch} "
            f"but this pass is seed {seed}, epoch {epoch} — one stream feeds two loaders at "
            "once; give each loader its own stream or pass read_crop=False")
    return mark.sizes


def take(batch: Any) -> bool:
    """Take the mark off a batch; True when it was cropped while read."""
    return isinstance(batch, dict) and isinstance(batch.pop(STORED_KEY, None), Cropped)


def dct_scales(boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The largest DCT scale 1/s (s in 1, 2, 4, 8) that keeps each box at least ``size``."""
    fit = np.minimum(boxes[:, 2] // max(size[0], 1), boxes[:, 3] // max(size[1], 1))
    return np.select([fit >= 8, fit >= 4, fit >= 2], [8, 4, 2], 1).astype(np.int64)


def scaled_regions(boxes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Each box in the pixels of its image decoded at 1/scale: the scaled pixels it covers
    (top and left rounded down, bottom and right up)."""
    s = scales[:, None]
    start = boxes[:, :2] // s
    stop = -(-(boxes[:, :2] + boxes[:, 2:]) // s)
    return np.concatenate([start, stop - start], axis=1)


_SLACK = 96  # pixels a decoded row may hold beyond its region (codecs/jpeg.cpp kSlack)


def _arena(regions: np.ndarray) -> torch.Tensor:
    """A pooled decode buffer that holds ``regions`` (``buffers.reused_scratch``)."""
    need = int((np.maximum(regions[:, 2], 1) * (np.maximum(regions[:, 3], 1) + _SLACK)).sum()) * 3
    return reused_scratch(need)


def decode_boxes(images: Sequence[Any], boxes: torch.Tensor,
                 fast: tuple[int, int] | None = None,
                 reuse: bool = False,
                 regions: np.ndarray | None = None) -> tuple[list[Any], torch.Tensor]:
    """Each ``EncodedImage``'s crop box decoded alone (libjpeg-turbo, the pixels of a full
    decode; ``npu_data.codecs``) and its box moved to the region's origin; the
    JPEGs the region decoder leaves (EXIF orientation, CMYK, no libjpeg) decoded whole.
    ``fast = (h, w)``: a box at least twice that is decoded DCT-scaled (1/2, 1/4 or 1/8 —
    less work, not the exact pixels) and its box becomes the scaled region. ``reuse``: the
    regions are views into a pooled decode buffer (kept across batches, threads and epochs:
    no allocation, no fresh pages), reused once nothing holds a view of it. ``regions``
    (B, 4): decode these instead of the boxes (a window's pixels; not with ``fast``), each
    box then moved by its region's origin."""
    items, boxes = list(images), boxes.clone()
    lazy = [i for i, im in enumerate(items) if isinstance(im, EncodedImage)]
    if not lazy:
        return items, boxes
    jpeg = codecs.jpeg_ops() if read_crop.decodes_regions(boxes) else None
    left = lazy
    if jpeg is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            streams = [torch.from_numpy(items[i].data) for i in lazy]
        sizes = torch.tensor([items[i].shape[:2] for i in lazy], dtype=torch.int64)
        wanted = boxes[lazy].numpy() if regions is None else regions[lazy]
        scales = dct_scales(wanted, fast) if fast else np.ones(len(lazy), np.int64)
        regions_at = scaled_regions(wanted, scales) if fast else wanted
        regions, status = jpeg.decode_regions(
            streams, torch.from_numpy(regions_at), sizes, torch.from_numpy(scales),
            _arena(regions_at) if reuse else None)
        left = []
        for k, (i, region, ok) in enumerate(zip(lazy, regions, (status == 0).tolist(),
                                                strict=True)):
            if ok:
                items[i] = region.numpy()
                if fast:  # the box became the scaled region
                    boxes[i] = torch.tensor([0, 0, *regions_at[k, 2:]])
                else:  # the box in the region's pixels (the region itself for a box crop)
                    boxes[i, :2] -= torch.from_numpy(regions_at[k, :2])
            else:
                left.append(i)
    for i in left:
        items[i] = items[i].decode()
    return items, boxes
