"""The pipeline the loaders hold: the user's keyed transform, built once, seen from a loader.

A loader calls it at most three times per batch, and nothing else of ``transforms``:

- :meth:`Pipeline.draw` where the batch's samples are known (the index sampler, or where a
  stream reads): its ``BatchRequest`` — the whole pipeline's keyed parameters drawn once from
  the stored sizes and, when the reader crops, the leading crop's ``CropPlan``;
- :func:`read` where the batch is assembled, only when its request carries a crop: the
  geometry through the crop and each image's box resized into the batch buffer;
- :meth:`Pipeline.finish` after the read (in the main process after the copy, or in the
  assembler, ``loaders.placement``): the rest of the pipeline with the request's parameters.

The bytes are those of running the whole transform on the full batch (``read_crop``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from npu_data.batch import Batch, BatchRequest, CropPlan
from npu_data.transforms import draws
from npu_data.transforms.base import Params, Transform, donating
from npu_data.transforms.read_crop import (
    ReadCrop,
    apply_after_read,
    crop_geometry,
    decodes_regions,
    read_regions,
    resize_into,
)

__all__ = ["Pipeline", "read"]


class Pipeline:
    """A keyed transform as the loaders run it (module doc).

    Attributes:
        transform: the user's transform (keyed: its parameters are drawn per sample).
        crop: the leading crop a reader may apply (None: it has none).
    """

    def __init__(self, transform: Transform) -> None:
        self.transform = transform
        self.crop = ReadCrop.of(transform)

    @classmethod
    def of(cls, transform: Any) -> Pipeline | None:
        """The pipeline of ``transform`` when its parameters are drawn per sample, else None."""
        return cls(transform) if isinstance(transform, Transform) and transform.keyed else None

    def draw(self, indices: Sequence[int], ids: np.ndarray, sizes: np.ndarray,
             seed: int, epoch: int, *, crop: bool = False, fast: bool = False,
             bucket: int | None = None, placed: bytes | None = None) -> BatchRequest:
        """The request of the samples ``indices`` whose augmentation keys are ``ids`` (dataset
        indices or ``draws.string_ids``) and stored images ``sizes (B, 2)``, in the pass of
        ``seed`` and ``epoch``; ``crop``: the reader applies the leading crop (``fast``: a
        JPEG box may decode DCT-scaled); ``bucket`` and ``placed`` travel as they are."""
        plan = None
        if crop and self.crop is not None:
            drawn, plan = self.crop.at(seed, epoch, fast).draw_plan(sizes, ids)
            # what a JPEG decodes: the windows' pixels, in regions where the kernels allow
            plan = replace(plan, regions=read_regions(plan),
                           decode_regions=decodes_regions(torch.empty(0, dtype=torch.int64)))
            params = {k: v.numpy() for k, v in drawn.items()}
        else:
            keys = draws.sample_keys(seed, epoch, ids)
            params = {k: v.numpy() for k, v in self.transform.draw_keyed(sizes, keys).items()}
        return BatchRequest(tuple(int(i) for i in indices), ids, seed, epoch, bucket, params,
                            plan, placed)

    def draw_for(self, batch: Mapping[str, Any], seed: int, epoch: int, *, crop: bool = False,
                 fast: bool = False) -> BatchRequest | None:
        """The request of a batch assembled without one (a stream's, a list of samples):
        drawn from its ``sizes`` and its ``index`` or ``__key__`` column; None when it has
        neither."""
        ids = sample_ids(batch)
        sizes = batch.get("sizes")
        if ids is None or not isinstance(sizes, torch.Tensor):
            return None
        return self.draw(range(len(ids)), ids, sizes.numpy(), seed, epoch, crop=crop,
                         fast=fast)

    def finish(self, batch: Batch, request: BatchRequest, cropped: bool,
               donate: bool = False) -> Batch:
        """The pipeline on a batch read for ``request`` (after the reader's crop when
        ``cropped``): the rest of it with the request's parameters; ``donate``: the batch is
        the loader's alone, the kernels may write into its image."""
        params: Params = {k: torch.from_numpy(v) for k, v in (request.params or {}).items()}
        with donating(batch.get("image") if donate else None):
            return dict(apply_after_read(self.transform, batch, params, cropped))


def sample_ids(batch: Mapping[str, Any]) -> np.ndarray | None:
    """The batch's sample ids: its ``index`` column, else hashes of its ``__key__`` strings."""
    index = batch.get("index")
    if isinstance(index, torch.Tensor) and index.ndim == 1 and not index.is_floating_point():
        return index.numpy().astype(np.int64)
    names = batch.get("__key__")
    if isinstance(names, (list, tuple)) and names and all(isinstance(k, str) for k in names):
        return draws.string_ids(list(names))
    return None


def read(batch: Batch, images: Sequence[Any], boxes: torch.Tensor, plan: CropPlan,
         buffer: Callable[[Batch, tuple[int, ...]], torch.Tensor]) -> Batch:
    """A batch assembled at its stored ``sizes`` (``image`` not set) through ``plan``: the
    geometry moved, ``sizes`` the output size, the image ``buffer(batch, (B, 3, h, w))``
    (the reader's: shared memory in a worker, pinned, or pooled) holding each image's box
    resized (``images``: ``(H, W, 3)`` arrays; ``boxes (B, 4)`` the plan's, moved to each
    array's origin where only a region was decoded)."""
    cropped = crop_geometry(batch, plan)
    image = buffer(cropped, (len(images), 3, *plan.size))
    resize_into(images, boxes, image, plan.windows, plan.interpolation)
    cropped["image"] = image
    return cropped
