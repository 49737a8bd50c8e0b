"""Crop at read, the reader's part: a batch's images read through its request's ``CropPlan``.

The plan (``npu_data.batch.CropPlan``: each image's crop box, window and output size, the
pixels a window reads) is drawn by the transforms before a pixel is read
(``transforms.pipeline.Pipeline.draw``); :func:`read` applies it to a batch assembled at its
stored sizes, whatever the source (a memory map, an encoded shard, a tar stream):

- :func:`decode_boxes`: each JPEG (``EncodedImage``) decoded only in its box, or in the
  pixels its window reads (libjpeg-turbo, the pixels of a full decode; ``plan.fast``:
  DCT-scaled where the box is at least twice the output, :func:`dct_scales`);
- :func:`crop_geometry`: the batch's geometry keys moved through the plan's boxes
  (``geometry.resized_crop_geometry``), ``sizes`` the output size, the micro-conditioning
  keys the crop writes;
- :func:`resize_into`: each image's box resized straight into the batch buffer
  (``functional.resized_crop_list``).

The values are those of collating the full images and running the crop after: the same
kernel on the same pixels. The transforms then run what follows the crop
(``Pipeline.finish``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from npu_data import codecs
from npu_data.batch import Batch, CropPlan, EncodedImage
from npu_data.buffers import reused_scratch
from npu_data.transforms import functional as F
from npu_data.transforms import geometry
from npu_data.transforms.base import CropParams, Params
from npu_data.transforms.crop import effective_boxes, micro_conditioning

__all__ = ["crop_geometry", "dct_scales", "decode_boxes", "read", "resize_into",
           "scaled_regions"]


def read(batch: Batch, images: Sequence[Any], plan: CropPlan,
         buffer: Callable[[Batch, tuple[int, ...]], torch.Tensor]) -> Batch:
    """A batch assembled at its stored ``sizes`` (``image`` not set) read through ``plan``.

    Args:
        batch: The assembled batch (``sizes``: the stored sizes; geometry keys, meta).
        images: Each sample's ``(H, W, 3)`` uint8 array (a memory-map view) or
            ``EncodedImage`` (a JPEG of which only the box, or the pixels its window reads,
            is decoded: :func:`decode_boxes`).
        plan: The batch's crop (its request's ``crop``).
        buffer: ``buffer(batch, (B, 3, h, w))``: the image buffer (shared memory in a
            worker, pinned, or pooled).

    Returns:
        The batch with its geometry moved (:func:`crop_geometry`) and ``image`` the buffer
        holding each image's box resized (:func:`resize_into`).
    """
    boxes = torch.from_numpy(np.ascontiguousarray(plan.boxes, dtype=np.int64))
    if any(isinstance(im, EncodedImage) for im in images):
        images, boxes = decode_boxes(images, boxes, plan.size if plan.fast else None,
                                     reuse=True, regions=plan.regions,
                                     in_regions=plan.decode_regions)
    cropped = crop_geometry(batch, plan)
    image = buffer(cropped, (len(images), 3, *plan.size))
    resize_into(images, boxes, image, plan.windows, plan.interpolation)
    cropped["image"] = image
    return cropped


def plan_params(plan: CropPlan) -> Params:
    """A ``CropPlan``'s parameters as the host tensors the crop's ``apply`` takes."""
    def host(v: np.ndarray | None) -> torch.Tensor | None:
        return None if v is None else torch.from_numpy(np.ascontiguousarray(v, np.int64))

    boxes = host(plan.boxes)
    assert boxes is not None
    return CropParams(boxes, host(plan.windows), host(plan.out), host(plan.top_left)
                      ).as_params()


def crop_geometry(batch: Batch, plan: CropPlan) -> Batch:
    """A batch collated at the stored sizes, its geometry through the plan's crop.

    Args:
        batch: The collated batch (``sizes``: the stored sizes; geometry keys of the kinds).
        plan: The crop every sample gets.

    Returns:
        The batch with its geometry keys through the crop, ``sizes`` the output size and the
        micro-conditioning keys the crop writes (``transforms.crop``); ``image`` as it
        was.
    """
    out = dict(batch)
    params = plan_params(plan)
    effective = effective_boxes(params, plan.size)
    out.update(geometry.resized_crop_geometry(batch, effective, plan.size, plan.min_visible))
    top_left, target = micro_conditioning(params, batch["sizes"], plan.size)
    original = batch.get("original_size")  # the photo's, where the dataset recorded it
    out["original_size"] = (original if isinstance(original, torch.Tensor)
                            else batch["sizes"].to(torch.int64).clone())
    out["crop_top_left"], out["target_size"] = top_left, target
    # a real (B, 2) tensor, not an expanded view: a pinned copy cannot be made of one whose
    # elements share memory (torch's pin-memory thread raises)
    out["sizes"] = target.clone()
    return out


def resize_into(images: Sequence[np.ndarray], boxes: torch.Tensor, out: torch.Tensor,
                windows: np.ndarray | None = None, interpolation: str = "bilinear"
                ) -> torch.Tensor:
    """Each array's box resized into its row of ``out``.

    Args:
        images: ``(H, W, 3)`` uint8 arrays (memory-map views or decoded regions).
        boxes: ``(B, 4)`` the plan's boxes, moved to each array's origin where only a region
            was read.
        out: ``(B, 3, h, w)`` uint8, written.
        windows: The plan's windows (whole resizes kept in part), or None.
        interpolation: The plan's resize filter.

    Returns:
        ``out``.
    """
    if not len(images):
        return out
    with warnings.catch_warnings():  # memory-map views are read-only; nothing writes them
        warnings.simplefilter("ignore", UserWarning)
        tensors = [torch.from_numpy(im) for im in images]
    win = None if windows is None else torch.from_numpy(np.ascontiguousarray(windows))
    return F.resized_crop_list(tensors, boxes, out, win, interpolation=interpolation)


# --- JPEG boxes -----------------------------------------------------------------------------
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
                 regions: np.ndarray | None = None,
                 in_regions: bool = True) -> tuple[list[Any], torch.Tensor]:
    """Each ``EncodedImage``'s crop box decoded alone (libjpeg-turbo, the pixels of a full
    decode; ``npu_data.codecs``) and its box moved to the region's origin; the
    JPEGs the region decoder leaves (EXIF orientation, CMYK, no libjpeg) decoded whole.
    ``fast = (h, w)``: a box at least twice that is decoded DCT-scaled (1/2, 1/4 or 1/8 —
    less work, not the exact pixels) and its box becomes the scaled region. ``reuse``: the
    regions are views into a pooled decode buffer (kept across batches, threads and epochs:
    no allocation, no fresh pages), reused once nothing holds a view of it. ``regions``
    (B, 4): decode these instead of the boxes (a window's pixels; not with ``fast``), each
    box then moved by its region's origin. ``in_regions`` False: every JPEG decoded whole
    (the torch kernels forced, as their reference does)."""
    items, boxes = list(images), boxes.clone()
    lazy = [i for i, im in enumerate(items) if isinstance(im, EncodedImage)]
    if not lazy:
        return items, boxes
    jpeg = codecs.jpeg_ops() if in_regions else None
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
