"""The DataLoader's crop at read: one strategy object per loader (``CropAtRead``).

When the loader's transform is keyed and starts with a crop (``transforms.read_crop``), the
collate is ours and the dataset is a ``ShardDataset`` or a stream that crops where it reads
(``WebDatasetStream``), each pass applies that crop while the batches are read: a
``ShardDataset``'s batches leave the main process as ``PlannedIndices`` carrying their
``CropPlan`` (:class:`PlannedBatches`, drawn from (seed, epoch, index) and the stored sizes);
a stream is armed for the pass (``stream_crop``) and draws each batch's plan where it reads
it. Either way the reader applies the plan (``crop_read.crop_batch``) and marks the batch;
the loader takes the mark off, draws the whole pipeline's parameters from the stored sizes
and runs the rest of the pipeline (``compose.Split.rest``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from npu_data.common.batch import PlannedIndices
from npu_data.loaders import crop_read, stream_crop
from npu_data.loaders.collate import is_collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.transforms.read_crop import ReadCrop


class ShardPass:
    """One pass's crop over a ``ShardDataset``: its stored sizes and the pass's crop."""

    def __init__(self, sizes: np.ndarray, crop: ReadCrop) -> None:
        self.sizes, self.crop = sizes, crop


class PlannedBatches:
    """A batch sampler whose batches carry their ``CropPlan`` (drawn in the main process)
    while ``plan`` is set, and pass unchanged otherwise. One per loader: torch's
    persistent-worker iterator keeps the index sampler of its first pass, so the plan
    changes, not the object."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches
        self.plan: ShardPass | None = None

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
            yield PlannedIndices(batch, plan.crop.plan(plan.sizes[ids], ids))


def refusal(loader: Any) -> str:
    """Why ``loader`` cannot crop while reading ("" when it can)."""
    if not isinstance(loader.dataset, ShardDataset) and \
            stream_crop.state_of(loader.dataset) is None:
        return "the dataset is not a ShardDataset or a WebDatasetStream"
    if loader.batch_size is None and loader.batch_sampler is None:
        return "batch_size=None (no batches)"
    if not is_collate_samples(loader.collate_fn):
        return "a collate_fn gets the full samples"
    if loader.image_key is not None:
        return "image_key= selects a batch element, not the batch dict"
    if ReadCrop.of(loader.transform) is None:
        return "the transform does not start with an npu_data crop (RandomResizedCrop, ...)"
    return ""


class CropAtRead:
    """One loader's crop at read (module doc): ``batches`` is the loader's index sampler
    (a :class:`PlannedBatches` when it has batches); :meth:`begin` sets up each pass."""

    def __init__(self, dataset: Any, batches: Any | None) -> None:
        self.dataset = dataset
        self.batches = PlannedBatches(batches) if batches is not None else None

    def begin(self, loader: Any, epoch: int) -> stream_crop.Armed:
        """Crop at read in this pass of ``loader`` (augmentation ``epoch``) when it wants to
        (``read_crop`` not False) and can (:func:`refusal`); returns what ends the pass (a
        stream is disarmed when it is closed or dropped)."""
        crop = None
        if loader.read_crop is not False and not refusal(loader):
            crop = ReadCrop.of(loader.transform, loader.decode == "fast")
        crop = None if crop is None else crop.at(loader.seed, epoch)
        if self.batches is not None:
            self.batches.plan = None
            if crop is not None and isinstance(self.dataset, ShardDataset):
                self.batches.plan = ShardPass(self.dataset.sizes(), crop)
        return stream_crop.arm(self.dataset, crop)

    @staticmethod
    def stored_sizes(batch: Any, seed: int, epoch: int) -> np.ndarray:
        """The sizes a batch's parameters are drawn from: the stored ones of a batch cropped
        while read (``crop_read.stored_sizes``), else its ``sizes``."""
        stored = crop_read.stored_sizes(batch, seed, epoch)
        return batch["sizes"].numpy() if stored is None else stored

    @staticmethod
    def take(batch: Any) -> bool:
        """Take the mark off a batch; True when it was cropped while read."""
        return crop_read.take(batch)
