"""Crop at read for streams (``WebDatasetStream``): the keyed pipeline's leading crop applied
where an iterable dataset reads its samples.

A stream's samples are not known in the main process, so their crop boxes — a pure function
of (seed, epoch, sample id) and the stored size (``transforms.read_crop``) — are drawn where
they are read. The DataLoader arms the stream's ``CropState`` for one pass (``arm``): the
``ReadCrop`` travels with the stream to the workers (pickled once, when they start), the
seed, the pass's augmentation epoch and the decode mode sit in shared memory, so persistent
workers follow every pass. While armed, the stream yields sample dicts whose JPEG is still
encoded (only its header read, for the size) tagged with the pass's ``ReadCrop``
(``PLAN_KEY``); ``collate_samples`` collates their geometry, draws the batch's ``CropPlan``
and applies it (``crop_read.crop_batch``, as for shards): the batch is marked ``Cropped``
with its stored sizes, and the DataLoader runs only the rest of the pipeline.

Whatever a worker does, each batch says whether it was cropped: a worker whose crop is not
the loader's any more (persistent workers started before the transform changed) yields full
samples, which get the whole pipeline in the main process.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from npu_data.buffers import empty_host
from npu_data.errors import UserError
from npu_data.loaders import crop_read
from npu_data.loaders.sample_ids import sample_ids
from npu_data.transforms.read_crop import ReadCrop

PLAN_KEY = "__read_crop__"  # in a stream's sample dict: the ReadCrop of its pass

_ARMED, _GENERATION, _SEED, _EPOCH, _FAST = range(5)


class CropState:
    """What a DataLoader arms in a stream: the ``ReadCrop`` (an attribute, so a worker keeps
    the one it started with) and, in shared memory, whether a pass is armed, the crop's
    generation, the seed, the epoch and the decode mode (so every process sees each pass)."""

    def __init__(self) -> None:
        self.stage: ReadCrop | None = None  # the pass-independent crop (seed, epoch 0)
        self.generation = 0
        self._stage_bytes = b""
        self._tokens = 0
        self.shared = multiprocessing.RawArray("q", 5)

    def arm(self, crop: ReadCrop) -> int:
        """Arm a pass (main process); returns its token for ``disarm``."""
        stage = crop.at(0, 0, fast=False)
        pickled = pickle.dumps(stage)
        if self.stage is None or pickled != self._stage_bytes:  # a new crop: a new generation
            self.stage, self._stage_bytes = stage, pickled
            self.generation = int(self.shared[_GENERATION]) + 1
            self.shared[_GENERATION] = self.generation
        self._tokens += 1
        self.shared[_SEED], self.shared[_EPOCH] = crop.seed, crop.epoch
        self.shared[_FAST] = int(crop.fast)
        self.shared[_ARMED] = self._tokens
        return self._tokens

    def disarm(self, token: int | None = None) -> None:
        """End the pass ``token`` (any pass when None); a later pass stays armed."""
        if token is None or int(self.shared[_ARMED]) == token:
            self.shared[_ARMED] = 0

    def plan(self) -> ReadCrop | None:
        """The armed pass's crop, in whichever process reads the stream; None when no pass
        is armed or this copy's crop is not the armed one."""
        s = self.shared
        if not s[_ARMED] or self.stage is None or int(s[_GENERATION]) != self.generation:
            return None
        return self.stage.at(int(s[_SEED]), int(s[_EPOCH]), bool(s[_FAST]))


def state_of(dataset: Any) -> CropState | None:
    """The ``CropState`` of a dataset that crops where it reads (``crop_at_read``), or None."""
    state = getattr(dataset, "crop_at_read", None)
    return state if isinstance(state, CropState) else None


class Armed:
    """One pass of a loader over an armed stream: disarms it when closed or dropped (a pass
    left early), so other readers of the stream get full samples again."""

    def __init__(self, state: CropState | None, token: int) -> None:
        self.state, self.token = state, token

    def close(self) -> None:
        if self.state is not None:
            self.state.disarm(self.token)
            self.state = None

    def __del__(self) -> None:
        self.close()


def arm(dataset: Any, crop: ReadCrop | None) -> Armed:
    """Arm ``dataset``'s crop at read for one pass (``crop`` None: disarm it)."""
    state = state_of(dataset)
    if state is None:
        return Armed(None, 0)
    if crop is None:
        state.disarm()
        return Armed(None, 0)
    return Armed(state, state.arm(crop))


def plan_of(sample: Any) -> ReadCrop | None:
    """The crop a stream's sample dict is tagged with (None for any other sample)."""
    plan = sample.get(PLAN_KEY) if isinstance(sample, Mapping) else None
    return plan if isinstance(plan, ReadCrop) else None


def crop_batch(batch: dict[str, Any], images: Sequence[Any], crop: ReadCrop,
               pin: bool) -> dict[str, Any]:
    """A collated batch of a stream's tagged samples (geometry of the stored images,
    ``sizes`` the stored sizes, no ``image``) through its pass's crop: the batch's
    ``CropPlan`` drawn from its sample ids, then ``crop_read.crop_batch``."""
    ids = sample_ids(batch)
    if ids is None:
        raise UserError("crop at read: the stream's samples carry no 'index' nor '__key__' — "
                        "pass DataLoader(read_crop=False)")
    plan = crop.plan(batch["sizes"].numpy(), ids)
    return crop_read.crop_batch(batch, images, plan,
                                lambda _, shape: empty_host(shape, torch.uint8, pin))
