"""The request of one batch (``npu_data.batch.BatchRequest``), drawn once where its samples are
known: in the main process for a ``ShardDataset``, where the stream reads for a
``WebDatasetStream``.

A keyed transform's parameters are a pure function of (seed, epoch, sample id) and of the
stored sizes (``transforms.draws``), so the whole pipeline's parameters are drawn before a
pixel is read. When the loader crops while reading (``read_crop``, :func:`refusal`), the
request also carries the leading crop's ``CropPlan`` (taken out of those parameters,
``transforms.read_crop``): the reader applies it, the loader runs the rest of the pipeline
with the same parameters — the crop is drawn once.

- A ``ShardDataset``'s batches leave the batch sampler as requests (:class:`RequestBatches`,
  one per loader: torch's persistent-worker iterator keeps the index sampler of its first
  pass, so each pass changes what it draws, not the object).
- A stream's samples are known only where they are read: the loader arms the stream's
  :class:`CropState` for one pass (the ``ReadCrop`` travels with the stream to the workers,
  the seed, epoch and decode mode sit in shared memory, so persistent workers follow every
  pass); the assembler draws each batch's request from its sample ids and stored sizes
  (:func:`stream_request`).

Our datasets serve npu_data's DataLoader raw samples (it transforms them itself) and torch's
loader transformed ones (``loaders.host_transform``): the loader's workers
(:func:`mark_worker`) and its in-process reads (:func:`loader_reads`) mark themselves.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data.batch import BatchRequest
from npu_data.errors import UserError
from npu_data.loaders.bucket_sampler import BucketBatchSampler
from npu_data.loaders.placement import WorkerPipeline
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import draws
from npu_data.transforms.base import Params, Transform
from npu_data.transforms.read_crop import ReadCrop


def sample_ids(batch: Mapping[str, Any]) -> np.ndarray | None:
    """The batch's sample ids: its ``index`` column, else hashes of its ``__key__`` strings."""
    index = batch.get("index")
    if isinstance(index, torch.Tensor) and index.ndim == 1 and not index.is_floating_point():
        return index.numpy().astype(np.int64)
    names = batch.get("__key__")
    if isinstance(names, (list, tuple)) and names and all(isinstance(k, str) for k in names):
        return draws.string_ids(list(names))
    return None


# --- who reads ------------------------------------------------------------------------------
_local = threading.local()
_in_loader_worker = False


def mark_worker() -> None:
    """This process is a worker of npu_data's DataLoader: datasets serve raw samples."""
    global _in_loader_worker
    _in_loader_worker = True


def by_loader() -> bool:
    """Whether npu_data's DataLoader is reading (it applies the transform itself)."""
    return _in_loader_worker or bool(getattr(_local, "reading", False))


def loader_reads(source: Iterator[Any]) -> Iterator[Any]:
    """``source``'s items, each read marked as npu_data DataLoader's (on whichever thread
    consumes this iterator)."""
    while True:
        _local.reading = True
        try:
            item = next(source)
        except StopIteration:
            return
        finally:
            _local.reading = False
        yield item



def as_arrays(params: Params) -> dict[str, np.ndarray]:
    """Drawn parameters as arrays: plain data that pickles small (no shared-memory tensor)."""
    return {k: v.numpy() for k, v in params.items()}


def as_params(arrays: Mapping[str, np.ndarray]) -> Params:
    """A request's parameters as the host tensors the transforms take (no copy)."""
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


@dataclass(frozen=True)
class Keyed:
    """A batch's keyed parameters on the host (the whole pipeline's), whether its reader
    applied the leading crop (then only the rest of the pipeline runs) and whether it ran the
    whole pipeline (``loaders.placement``: nothing is left to run)."""

    params: Params
    cropped: bool = False
    applied: bool = False


@dataclass(frozen=True)
class PassDraw:
    """What one pass draws its requests with: the keyed ``transform``, the loader's ``seed``,
    the pass's augmentation ``epoch``, the crop the reader applies (None: none) and the token
    of the pipeline the reader runs (``loaders.placement``; None: the main process runs it)."""

    transform: Transform
    seed: int
    epoch: int
    crop: ReadCrop | None = None
    placed: bytes | None = None

    def request(self, indices: Any, ids: np.ndarray, sizes: np.ndarray,
                bucket: int | None = None) -> BatchRequest:
        """The request of the samples ``ids`` whose stored images are ``sizes (B, 2)``."""
        plan = None
        if self.crop is not None:  # the crop's pass is this one: its draw is the transform's
            params, plan = self.crop.draw_plan(sizes, ids)
        else:
            keys = draws.sample_keys(self.seed, self.epoch, ids)
            params = self.transform.draw_keyed(sizes, keys)
        return BatchRequest(tuple(int(i) for i in indices), ids, self.seed, self.epoch, bucket,
                            as_arrays(params), plan, self.placed)


class RequestBatches:
    """The loader's index sampler for a ``ShardDataset``: while a pass ``draw`` is set each
    batch of indices becomes its :class:`BatchRequest` (drawn in the main process from the
    stored sizes); otherwise the batches pass unchanged."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches
        self.draw: PassDraw | None = None
        self.sizes: np.ndarray | None = None
        self.buckets: np.ndarray | None = None  # (N,) each sample's bucket, when bucketed

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        draw, sizes, buckets = self.draw, self.sizes, self.buckets
        if draw is None or sizes is None:
            yield from self.batches
            return
        n = max(len(sizes), 1)
        for batch in self.batches:
            given = np.asarray(batch, dtype=np.int64).reshape(-1)
            # a repeat's virtual id keys its draws (shards.repeats); the dataset reads i % n
            ids = np.where(given < n, given % n, given)
            i = ids % n
            bucket = int(buckets[i[0]]) if buckets is not None and len(ids) else None
            yield draw.request(batch, ids, sizes[i], bucket)


# --- streams --------------------------------------------------------------------------------
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
    """The ``CropState`` of a dataset that crops where it reads, or None."""
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


def stream_request(crop: ReadCrop, batch: Mapping[str, Any], sizes: np.ndarray) -> BatchRequest:
    """The request of a stream's batch (its geometry collated, ``sizes`` the stored ones),
    drawn where it was read with its pass's crop."""
    ids = sample_ids(batch)
    if ids is None:
        raise UserError("crop at read: the stream's samples carry no 'index' nor '__key__' — "
                        "pass DataLoader(read_crop=False)")
    transform = crop.pipeline if crop.pipeline is not None else crop.crop
    draw = PassDraw(transform, crop.seed, crop.epoch, crop)
    return draw.request(range(len(ids)), ids, sizes)


# --- the loader's requests ------------------------------------------------------------------
ASSEMBLERS: set[Callable[..., Any]] = set()  # the loaders' own collate functions (assemble)


def is_collate_samples(fn: Any) -> bool:
    """``fn`` is the loaders' assembler (``collate_samples``, or a ``functools.partial``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn in ASSEMBLERS


def refusal(loader: Any) -> str:
    """Why ``loader`` cannot crop while reading ("" when it can)."""
    return _refusal(loader, ReadCrop.of(loader.transform))


def _refusal(loader: Any, crop: ReadCrop | None) -> str:
    """:func:`refusal`, with the loader's transform's ``ReadCrop.of`` already known."""
    if not isinstance(loader.dataset, ShardDataset) and state_of(loader.dataset) is None:
        return "the dataset is not a ShardDataset or a WebDatasetStream"
    if loader.batch_size is None and loader.batch_sampler is None:
        return "batch_size=None (no batches)"
    if not is_collate_samples(loader.collate_fn):
        return "a collate_fn gets the full samples"
    if loader.image_key is not None:
        return "image_key= selects a batch element, not the batch dict"
    if crop is None:
        return "the transform does not start with an npu_data crop (RandomResizedCrop, ...)"
    return ""


def worker_refusal(loader: Any) -> str:
    """Why ``loader``'s assembler cannot run its keyed pipeline ("" when it can)."""
    if not isinstance(loader.dataset, ShardDataset) or loader.dataset.latents is not None:
        return "the dataset is not a ShardDataset of images (its batches carry no request)"
    if loader.batch_size is None and loader.batch_sampler is None:
        return "batch_size=None (no batches)"
    if not is_collate_samples(loader.collate_fn):
        return "a collate_fn gets the samples"
    if keyed(loader) is None:
        return "the transform is not a keyed npu_data transform (or image_key= is set)"
    return ""


def keyed(loader: Any) -> Transform | None:
    """The loader's transform when its parameters are drawn per sample (keyed), else None."""
    t = loader.transform
    return t if isinstance(t, Transform) and t.keyed and loader.image_key is None else None


class Requests:
    """One loader's requests (module doc): ``batches`` is its index sampler (a
    :class:`RequestBatches` for a ``ShardDataset`` read in batches); :meth:`begin` sets up
    each pass."""

    def __init__(self, dataset: Any, batches: Any | None) -> None:
        self.dataset = dataset
        self.transform: Transform | None = None  # the pass's keyed transform (begin)
        ours = isinstance(dataset, ShardDataset) and dataset.latents is None
        self.batches = RequestBatches(batches) if batches is not None and ours else None

    def begin(self, loader: Any, epoch: int, pipeline: WorkerPipeline | None = None) -> Armed:
        """Draw this pass's requests of ``loader`` (augmentation ``epoch``): the keyed
        transform's parameters, and its leading crop where the loader wants to (``read_crop``
        not False) and can (:func:`refusal`) crop while reading; ``pipeline``: the loader's
        assembler runs the keyed pipeline too (``loaders.placement``). Returns what ends the
        pass (a stream is disarmed when it is closed or dropped)."""
        crop = None
        if loader.read_crop is not False:
            crop = ReadCrop.of(loader.transform, loader.decode == "fast", loader.seed, epoch)
            crop = None if _refusal(loader, crop) else crop
        self.transform = keyed(loader)
        if self.batches is not None:
            ours = is_collate_samples(loader.collate_fn)
            placed = None
            if pipeline is not None and self.transform is not None and ours:
                placed = pipeline.arm(self.transform)
            elif pipeline is not None:
                pipeline.disarm()
            self.batches.draw = None if self.transform is None or not ours else PassDraw(
                self.transform, loader.seed, epoch, crop, placed)
            self.batches.sizes = self.dataset.sizes() if self.batches.draw is not None else None
            bucketed = isinstance(loader.batch_sampler, BucketBatchSampler)
            self.batches.buckets = loader.batch_sampler.bucket_of if bucketed else None
        state = state_of(self.dataset)
        if state is None:
            return Armed(None, 0)
        if crop is None:
            state.disarm()
            return Armed(None, 0)
        return Armed(state, state.arm(crop))
