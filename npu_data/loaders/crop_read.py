"""Crop at read: a keyed pipeline's leading crop applied while the batch is read.

Every sample's parameters are a pure function of (seed, epoch, index) and of its stored size
(``transforms.draws``), so the loader knows each crop box before any pixel is read. The batch
sampler's batches leave the main process as ``PlannedIndices`` carrying those boxes; the
reader (``collate_columns``) resizes each crop straight from the stored pixels — a zero-copy
view of the memory map for raw shards, the decoded array for encoded ones — into the batch
buffer (one compiled call per batch, no full-image copy, no padding), and moves the geometry
keys with it. The main process then runs only the rest of the pipeline. The values are the
ones of collating the full images and running the crop there (the same kernel on the same
pixels), so ``batch["aug"]`` and the CPU replay are unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data import codecs
from npu_data.buffers import reused_scratch
from npu_data.common.batch import CropPlan, EncodedImage, PlannedIndices
from npu_data.transforms import _dispatch, draws, geometry
from npu_data.transforms import functional as F
from npu_data.transforms._kernels.crop import window_regions
from npu_data.transforms._kernels.resample import vertical_first_rule
from npu_data.transforms.base import Batch, Params, Transform
from npu_data.transforms.compose import Compose, apply_stages
from npu_data.transforms.crop import _CropBase
from npu_data.transforms.crop_base import effective_boxes, micro_conditioning, plan_params


def leading_crop(transform: Any) -> tuple[_CropBase, int] | None:
    """The keyed pipeline's first stage when it is a crop, with its draw position."""
    if not isinstance(transform, Transform) or not transform.keyed:
        return None
    if isinstance(transform, Compose):
        first = transform.transforms[0]
        return (first, draws.child_position(0, 0)) if isinstance(first, _CropBase) else None
    return (transform, 0) if isinstance(transform, _CropBase) else None


@dataclass
class Plan:
    """One pass's crop plan: the stored sizes, the crop stage and its draw position, the
    seed and the (augmentation) epoch."""

    sizes: np.ndarray
    crop: _CropBase
    position: int
    seed: int
    epoch: int
    fast: bool = False


class PlannedBatches:
    """A batch sampler whose batches carry their crop boxes (drawn in the main process) while
    ``plan`` is set, and pass unchanged otherwise. One per loader: torch's persistent-worker
    iterator keeps the index sampler of its first pass, so the plan changes, not the object."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches
        self.plan: Plan | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        plan = self.plan
        if plan is None:
            yield from self.batches
            return
        n = len(plan.sizes)
        for batch in self.batches:
            ids = np.asarray(batch, dtype=np.int64).reshape(-1) % max(n, 1)
            keys = draws.sample_keys(plan.seed, plan.epoch, ids)
            yield PlannedIndices(batch, plan.crop.read_plan(plan.sizes[ids], keys,
                                                            plan.position, plan.fast))


def apply_rest(transform: Transform, batch: Batch, params: Params) -> Batch:
    """The pipeline after its leading crop, with the whole pipeline's ``params``."""
    if not isinstance(transform, Compose):
        return batch
    return apply_stages(transform.transforms[1:], batch, params, first=1, full=True)


def crop_geometry(batch: Batch, boxes: torch.Tensor, crop: CropPlan) -> Batch:
    """The collated batch's geometry keys through the crop; ``sizes`` the output size; the
    micro-conditioning keys (``transforms.crop_base``) as the crop writes them."""
    out = dict(batch)
    params = plan_params(crop)
    effective = effective_boxes(params, crop.size) if crop.windows is not None else boxes
    out.update(geometry.resized_crop_geometry(batch, effective, crop.size, crop.min_visible))
    top_left, target = micro_conditioning(params, batch["sizes"], crop.size)
    out["original_size"] = batch["sizes"].to(torch.int64).clone()
    out["crop_top_left"], out["target_size"] = top_left, target
    # a real (B, 2) tensor, not an expanded view: a pinned copy cannot be made of one whose
    # elements share memory (torch's pin-memory thread raises)
    out["sizes"] = target.clone()
    return out


def crop_images(images: Sequence[Any], boxes: torch.Tensor, out: torch.Tensor,
                fast: bool = False, windows: np.ndarray | None = None) -> None:
    """Resize each image's crop box into ``out (B, 3, h, w)`` (contiguous): ``(H, W, 3)``
    arrays, or ``EncodedImage`` JPEGs, of which only the box is decoded (``decode_boxes``;
    ``fast``: DCT-scaled where the box is at least twice the output); ``windows``: each box
    resized whole and its window kept (``functional.resized_crop``)."""
    if not len(images):
        return
    if any(isinstance(im, EncodedImage) for im in images):
        size = (int(out.shape[2]), int(out.shape[3]))
        regions = None
        if windows is not None:  # decode only the pixels each window reads
            regions = window_regions(boxes.numpy(), windows, size[0], size[1])
            empty = (regions[:, 2] < 1) | (regions[:, 3] < 1)
            regions[empty] = (0, 0, 1, 1)
        images, boxes = decode_boxes(images, boxes, size if fast else None, reuse=True,
                                     regions=regions)
    with warnings.catch_warnings():  # memory-map views are read-only; nothing writes them
        warnings.simplefilter("ignore", UserWarning)
        tensors = [torch.from_numpy(im) for im in images]
    win = None if windows is None else torch.from_numpy(np.ascontiguousarray(windows))
    native = _dispatch.compiled_ops(out)
    if native is not None:
        if win is None:
            native.resized_crop_list(tensors, boxes, out.shape[2], out.shape[3],
                                     vertical_first_rule(), out)
        else:
            native.resized_crop_list(tensors, boxes, out.shape[2], out.shape[3],
                                     vertical_first_rule(), out, win)
        return
    for i, t in enumerate(tensors):  # the pure-torch kernel, one sample at a time
        h, w = t.shape[:2]
        sizes = torch.tensor([[h, w]], dtype=torch.int64)
        out[i] = F.resized_crop(t.permute(2, 0, 1)[None], sizes, boxes[i:i + 1],
                                tuple(out.shape[2:]),
                                windows=None if win is None else win[i:i + 1])[0]


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
    jpeg = codecs.jpeg_ops() if _dispatch.compiled_for(boxes) else None
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
