"""Crop at read for streams (``WebDatasetStream``): the keyed pipeline's leading crop applied
where an iterable dataset reads its samples.

A stream's samples are not known in the main process, so their crop boxes — a pure function
of (seed, epoch, sample id) and the stored size (``transforms.draws``) — are drawn where they
are read. The DataLoader arms the stream's ``CropState`` for one pass (``arm``): the crop
stage and its draw position travel with the stream to the workers (pickled once, when they
start), the seed and the pass's augmentation epoch sit in shared memory, so persistent
workers follow every pass. While armed, the stream yields sample dicts whose JPEG is still
encoded (only its header read, for the size) tagged with the pass's ``StreamPlan``
(``PLAN_KEY``); ``collate_samples`` collates their geometry, draws the batch's boxes,
decodes only each box and resizes it straight into the batch buffer (``crop_read``), and
moves the geometry — the values of collating the full images and cropping after. The batch
carries its stored sizes (``STORED_KEY``): the DataLoader takes them off, draws the whole
pipeline's parameters from them (``batch["aug"]`` unchanged) and runs only the rest of it.

Whatever a worker does, each batch says whether it was cropped: a worker whose stage is not
the loader's any more (persistent workers started before the transform changed) yields full
samples, which get the whole pipeline in the main process.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data.buffers import empty_host
from npu_data.errors import UserError
from npu_data.loaders import crop_read
from npu_data.transforms import draws
from npu_data.transforms.crop import _CropBase

PLAN_KEY = "__read_crop__"  # in a stream's sample dict: the StreamPlan of its pass
STORED_KEY = "__stored_sizes__"  # in a batch cropped while read: its Cropped mark

_ARMED, _GENERATION, _SEED, _EPOCH, _FAST = range(5)


@dataclass(frozen=True)
class StreamPlan:
    """One pass's crop at read in a stream: the crop stage, its draw position, the seed,
    the (augmentation) epoch, and whether JPEGs may decode DCT-scaled (``decode="fast"``)."""

    crop: _CropBase
    position: int
    seed: int
    epoch: int
    fast: bool = False


@dataclass(frozen=True)
class Cropped:
    """The mark of a batch cropped while read: its samples' stored ``sizes (B, 2)`` (height,
    width) and the seed and epoch its boxes were drawn with."""

    sizes: np.ndarray
    seed: int
    epoch: int


class CropState:
    """What a DataLoader arms in a stream: the crop stage (an attribute, so a worker keeps the
    one it started with) and, in shared memory, whether a pass is armed, the stage's
    generation, the seed, the epoch and the decode mode (so every process sees each pass)."""

    def __init__(self) -> None:
        self.stage: tuple[_CropBase, int] | None = None
        self.generation = 0
        self._stage_bytes = b""
        self._tokens = 0
        self.shared = multiprocessing.RawArray("q", 5)

    def arm(self, stage: tuple[_CropBase, int], seed: int, epoch: int,
            fast: bool = False) -> int:
        """Arm a pass (main process); returns its token for ``disarm``."""
        pickled = pickle.dumps(stage)
        if self.stage is None or pickled != self._stage_bytes:  # a new stage: a new generation
            self.stage, self._stage_bytes = stage, pickled
            self.generation = int(self.shared[_GENERATION]) + 1
            self.shared[_GENERATION] = self.generation
        self._tokens += 1
        self.shared[_SEED], self.shared[_EPOCH] = int(seed), int(epoch)
        self.shared[_FAST] = int(bool(fast))
        self.shared[_ARMED] = self._tokens
        return self._tokens

    def disarm(self, token: int | None = None) -> None:
        """End the pass ``token`` (any pass when None); a later pass stays armed."""
        if token is None or int(self.shared[_ARMED]) == token:
            self.shared[_ARMED] = 0

    def plan(self) -> StreamPlan | None:
        """The armed pass's plan, in whichever process reads the stream; None when no pass is
        armed or this copy's stage is not the armed one."""
        s = self.shared
        if not s[_ARMED] or self.stage is None or int(s[_GENERATION]) != self.generation:
            return None
        return StreamPlan(self.stage[0], self.stage[1], int(s[_SEED]), int(s[_EPOCH]),
                          bool(s[_FAST]))


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


def arm(dataset: Any, stage: tuple[_CropBase, int] | None, seed: int, epoch: int,
        fast: bool = False) -> Armed:
    """Arm ``dataset``'s crop at read for one pass (``stage`` None: disarm it)."""
    state = state_of(dataset)
    if state is None:
        return Armed(None, 0)
    if stage is None:
        state.disarm()
        return Armed(None, 0)
    return Armed(state, state.arm(stage, seed, epoch, fast))


def plan_of(sample: Any) -> StreamPlan | None:
    """The plan a stream's sample dict is tagged with (None for any other sample)."""
    plan = sample.get(PLAN_KEY) if isinstance(sample, Mapping) else None
    return plan if isinstance(plan, StreamPlan) else None


def crop_batch(batch: dict[str, Any], images: Sequence[Any], plan: StreamPlan,
               pin: bool) -> dict[str, Any]:
    """A collated batch of a stream's tagged samples (geometry of the stored images,
    ``sizes`` the stored sizes, ``image`` a placeholder) through the plan's crop: each box
    decoded alone (``EncodedImage`` JPEGs; DCT-scaled with ``plan.fast``) or read from the array, resized into the batch
    buffer, the geometry moved, ``sizes`` the output size, marked ``Cropped``."""
    from npu_data.loaders.sample_ids import sample_ids as _sample_ids  # the DataLoader's keys

    ids = _sample_ids(batch)
    if ids is None:
        raise UserError("crop at read: the stream's samples carry no 'index' nor '__key__' — "
                        "pass DataLoader(read_crop=False)")
    sizes = batch["sizes"].numpy().copy()
    keys = draws.sample_keys(plan.seed, plan.epoch, ids)
    crop = plan.crop.read_plan(sizes, keys, plan.position, plan.fast)
    boxes = torch.from_numpy(crop.boxes)
    out = crop_read.crop_geometry(batch, boxes, crop)
    image = empty_host((len(images), 3, *crop.size), torch.uint8, pin)
    crop_read.crop_images(images, boxes, image, crop.fast, crop.windows)
    out["image"] = image
    out[STORED_KEY] = Cropped(sizes, plan.seed, plan.epoch)
    return out


def stored_sizes(batch: Any, seed: int, epoch: int) -> np.ndarray | None:
    """The stored sizes of a batch a stream cropped while reading (None for any other
    batch); its boxes must have been drawn with this pass's seed and epoch."""
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
    """Take the mark off a batch; True when a stream cropped it while reading."""
    return isinstance(batch, dict) and isinstance(batch.pop(STORED_KEY, None), Cropped)
