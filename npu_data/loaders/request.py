"""The request of one batch (``npu_data.batch.BatchRequest``), drawn once where its samples are
known: in the main process for a ``ShardDataset``, where the stream reads for a
``WebDatasetStream``.

A keyed transform's parameters are a pure function of (seed, epoch, sample id) and of the
stored sizes (``transforms.draws``), so the loader's ``Pipeline`` (``transforms.pipeline``,
built once from its transform) draws the whole batch's parameters before a pixel is read.
When the loader crops while reading (``read_crop``, :func:`refusal`), the request also
carries the leading crop's ``CropPlan``: the reader applies it (``readers.read_crop``, called
by the assembler), the pipeline's ``finish`` runs the rest with the same parameters — the
crop is drawn once, and ``draw`` and ``finish`` are the two transforms calls of a batch.

- A ``ShardDataset``'s batches leave the batch sampler as requests (:class:`RequestBatches`,
  one per loader: torch's persistent-worker iterator keeps the index sampler of its first
  pass, so each pass changes what it draws, not the object). A ``LabelStudioDataset``'s
  leave it as requests too, with nothing drawn: a dataset asked for a request knows
  npu_data's DataLoader reads it (and serves raw samples: the loader transforms them).
- A stream's samples are known only where they are read: the loader arms the stream's
  :class:`CropState` for one pass (the pipeline travels with the stream to the workers,
  the seed, epoch and decode mode sit in shared memory, so persistent workers follow every
  pass); the assembler draws each batch's request from its sample ids and stored sizes
  (:func:`stream_request`).
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_data.batch import BatchRequest
from npu_data.errors import UserError
from npu_data.loaders.bucket_sampler import BucketBatchSampler
from npu_data.loaders.placement import WorkerPipeline
from npu_data.shards.reader import ShardDataset
from npu_data.transforms.pipeline import Pipeline


@dataclass(frozen=True)
class PassDraw:
    """What one pass draws its requests with: the loader's ``pipeline``, its ``seed``, the
    pass's augmentation ``epoch``, whether the reader applies the leading crop (``crop``,
    ``fast``: JPEG boxes may decode DCT-scaled) and the token of the pipeline the reader runs
    (``loaders.placement``; None: the main process runs it)."""

    pipeline: Pipeline
    seed: int
    epoch: int
    crop: bool = False
    fast: bool = False
    placed: bytes | None = None

    def request(self, indices: Any, ids: np.ndarray, sizes: np.ndarray,
                bucket: int | None = None) -> BatchRequest:
        """The request of the samples ``ids`` whose stored images are ``sizes (B, 2)``."""
        return self.pipeline.draw(indices, ids, sizes, self.seed, self.epoch, crop=self.crop,
                                  fast=self.fast, bucket=bucket, placed=self.placed)


class RequestBatches:
    """The loader's index sampler for a dataset that takes requests: while a pass ``draw`` is
    set each batch of indices becomes its :class:`BatchRequest` (drawn in the main process
    from the stored sizes); otherwise each becomes a request with nothing drawn (``single``:
    the sampler yields single indices, each a request of one sample)."""

    def __init__(self, batches: Any, single: bool = False) -> None:
        self.batches = batches
        self.single = single
        self.draw: PassDraw | None = None
        self.seed = self.epoch = 0  # the pass's, in a request with nothing drawn
        self.sizes: np.ndarray | None = None
        self.buckets: np.ndarray | None = None  # (N,) each sample's bucket, when bucketed

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        draw, sizes, buckets = self.draw, self.sizes, self.buckets
        if draw is None or sizes is None:
            for batch in self.batches:
                indices = (int(batch),) if self.single else tuple(int(i) for i in batch)
                yield BatchRequest(indices, np.asarray(indices, dtype=np.int64), self.seed,
                                   self.epoch)
            return
        n = max(len(sizes), 1)
        for batch in self.batches:
            given = np.asarray(batch, dtype=np.int64).reshape(-1)
            # a repeat's virtual id keys its draws (shards.repeats); the dataset reads i % n
            ids = np.where(given < n, given % n, given)
            i = ids % n
            bucket = int(buckets[i[0]]) if buckets is not None and len(ids) else None
            yield draw.request(batch, ids, sizes[i], bucket)


def takes_requests(dataset: Any) -> bool:
    """Whether ``dataset`` is read with requests (a ``ShardDataset`` of images, or a dataset
    whose class says it serves them: ``LabelStudioDataset.serves_requests``)."""
    if isinstance(dataset, ShardDataset):
        return dataset.latents is None
    return getattr(type(dataset), "serves_requests", False) is True


# --- streams --------------------------------------------------------------------------------
_ARMED, _GENERATION, _SEED, _EPOCH, _FAST = range(5)


class CropState:
    """What a DataLoader arms in a stream: the ``Pipeline`` (an attribute, so a worker keeps
    the one it started with) and, in shared memory, whether a pass is armed, the pipeline's
    generation, the seed, the epoch and the decode mode (so every process sees each pass)."""

    def __init__(self) -> None:
        self.pipeline: Pipeline | None = None
        self.generation = 0
        self._pipeline_bytes = b""
        self._tokens = 0
        self.shared = multiprocessing.RawArray("q", 5)

    def arm(self, pipeline: Pipeline, seed: int, epoch: int, fast: bool = False) -> int:
        """Arm a pass (main process); returns its token for ``disarm``."""
        pickled = pickle.dumps(pipeline)
        if self.pipeline is None or pickled != self._pipeline_bytes:  # a new generation
            self.pipeline, self._pipeline_bytes = pipeline, pickled
            self.generation = int(self.shared[_GENERATION]) + 1
            self.shared[_GENERATION] = self.generation
        self._tokens += 1
        self.shared[_SEED], self.shared[_EPOCH] = seed, epoch
        self.shared[_FAST] = int(fast)
        self.shared[_ARMED] = self._tokens
        return self._tokens

    def disarm(self, token: int | None = None) -> None:
        """End the pass ``token`` (any pass when None); a later pass stays armed."""
        if token is None or int(self.shared[_ARMED]) == token:
            self.shared[_ARMED] = 0

    def plan(self) -> PassDraw | None:
        """The armed pass's draw (its crop applied by the reader), in whichever process
        reads the stream; None when no pass is armed or this copy's pipeline is not the
        armed one."""
        s = self.shared
        if not s[_ARMED] or self.pipeline is None or int(s[_GENERATION]) != self.generation:
            return None
        return PassDraw(self.pipeline, int(s[_SEED]), int(s[_EPOCH]), True, bool(s[_FAST]))


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


def stream_request(draw: PassDraw, batch: Mapping[str, Any]) -> BatchRequest:
    """The request of a stream's batch (assembled at its stored ``sizes``), drawn where it
    was read with its pass's ``draw``.

    Raises:
        UserError: The stream's samples carry no ``index`` nor ``__key__``.
    """
    request = draw.pipeline.draw_for(batch, draw.seed, draw.epoch, crop=True,
                                     fast=draw.fast)
    if request is None:
        raise UserError("crop at read: the stream's samples carry no 'index' nor '__key__' — "
                        "pass DataLoader(read_crop=False)")
    return request


# --- the loader's requests ------------------------------------------------------------------
ASSEMBLERS: set[Callable[..., Any]] = set()  # the loaders' own collate functions (assemble)


def is_collate_samples(fn: Any) -> bool:
    """``fn`` is the loaders' assembler (``collate_samples``, or a ``functools.partial``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn in ASSEMBLERS


def refusal(loader: Any) -> str:
    """Why ``loader`` cannot crop while reading ("" when it can)."""
    return _refusal(loader, Pipeline.of(loader.transform))


def _refusal(loader: Any, pipeline: Pipeline | None) -> str:
    """:func:`refusal`, with the loader's pipeline already known."""
    if not isinstance(loader.dataset, ShardDataset) and state_of(loader.dataset) is None:
        return "the dataset is not a ShardDataset or a WebDatasetStream"
    if loader.batch_size is None and loader.batch_sampler is None:
        return "batch_size=None (no batches)"
    if not is_collate_samples(loader.collate_fn):
        return "a collate_fn gets the full samples"
    if loader.image_key is not None:
        return "image_key= selects a batch element, not the batch dict"
    if pipeline is None or pipeline.crop is None:
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
    if loader.image_key is not None or Pipeline.of(loader.transform) is None:
        return "the transform is not a keyed npu_data transform (or image_key= is set)"
    return ""


class Requests:
    """One loader's requests (module doc): ``batches`` is its index sampler (a
    :class:`RequestBatches` for a dataset that takes requests); :meth:`begin` sets up each
    pass; ``pipeline`` is the loader's keyed transform as it runs it (None: not keyed)."""

    def __init__(self, dataset: Any, batches: Any | None, single: bool = False) -> None:
        self.dataset = dataset
        self.pipeline: Pipeline | None = None  # the pass's (begin)
        self._of: Any = None  # the transform ``_built`` was built from
        self._built: Pipeline | None = None
        wraps = (batches is not None and takes_requests(dataset)
                 and (not single or not isinstance(dataset, ShardDataset)))
        self.batches = RequestBatches(batches, single) if wraps else None

    def _pipeline(self, loader: Any) -> Pipeline | None:
        """The loader's pipeline, built once per transform (None: not keyed, or image_key=)."""
        if loader.transform is not self._of:
            self._of = loader.transform
            self._built = Pipeline.of(loader.transform)
        return self._built if loader.image_key is None else None

    def begin(self, loader: Any, epoch: int, placed: WorkerPipeline | None = None) -> Armed:
        """Draw this pass's requests of ``loader`` (augmentation ``epoch``): the keyed
        transform's parameters, and its leading crop where the loader wants to (``read_crop``
        not False) and can (:func:`refusal`) crop while reading; ``placed``: the loader's
        assembler runs the keyed pipeline too (``loaders.placement``). Returns what ends the
        pass (a stream is disarmed when it is closed or dropped)."""
        pipeline = self.pipeline = self._pipeline(loader)
        crop = loader.read_crop is not False and not _refusal(loader, pipeline)
        fast = loader.decode == "fast"
        if self.batches is not None:
            ours = is_collate_samples(loader.collate_fn) and isinstance(self.dataset,
                                                                        ShardDataset)
            token = None
            if placed is not None and pipeline is not None and ours:
                token = placed.arm(pipeline)
            elif placed is not None:
                placed.disarm()
            self.batches.seed, self.batches.epoch = loader.seed, epoch
            self.batches.draw = None if pipeline is None or not ours else PassDraw(
                pipeline, loader.seed, epoch, crop, fast, token)
            self.batches.sizes = self.dataset.sizes() if self.batches.draw is not None else None
            bucketed = isinstance(loader.batch_sampler, BucketBatchSampler)
            self.batches.buckets = loader.batch_sampler.bucket_of if bucketed else None
        state = state_of(self.dataset)
        if state is None:
            return Armed(None, 0)
        if not crop or pipeline is None:
            state.disarm()
            return Armed(None, 0)
        return Armed(state, state.arm(pipeline, loader.seed, epoch, fast))
