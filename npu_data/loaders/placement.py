"""Where a DataLoader runs its keyed pipeline, and how many torch threads each process gets.

**Placement** (``DataLoader(augment_on=...)``): ``"device"`` runs the transform in the main
process on the loader's device after the copy; ``"workers"`` runs the whole keyed pipeline
where the batch is assembled (each worker on its own batch, or the read thread with
``num_workers=0``), so the main process only hands batches on; ``"auto"`` is ``"workers"``
for a CPU device with workers and ``"device"`` otherwise (an accelerator keeps the kernels;
``NPU_DATA_AUGMENT_ON`` chooses what ``"auto"`` means). The parameters are drawn once in the
main process for each batch (``loaders.request``) and keyed per sample, so the bytes are the
same in every placement.

A worker keeps the :class:`WorkerPipeline` it was started with (persistent workers keep it
across passes): each pass the main process arms its own copy with the pass's transform and
a token of it (a digest of its pickle) that every request carries; a worker whose transform
is not the pass's (the transform changed under persistent workers) leaves the batch to the
main process, as does any batch read without a request.

**Threads** (``DataLoader(threads=...)``, ``NPU_DATA_THREADS``): the processes that run
kernels share the cores this process may use (``os.sched_getaffinity``): with the pipeline in
the workers each worker gets ``cores // num_workers`` intra-op threads (torch's own worker
default is 1) and, on the CPU, the main process what they leave (at least 1) during a pass;
with the pipeline in the main process on the CPU it gets ``cores - num_workers`` during a pass
and each worker 1; the main process's count is restored when the pass ends. On an accelerator
the main process keeps its count. ``threads`` sets the count of whichever processes run the
pipeline.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from typing import Any

from npu_data.batch import Batch, BatchRequest
from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.pipeline import Pipeline

PLACEMENTS = ("auto", "device", "workers")
PLACEMENT_ENV = "NPU_DATA_AUGMENT_ON"
THREADS_ENV = "NPU_DATA_THREADS"


def check(augment_on: Any, threads: Any) -> None:
    """``augment_on`` is a placement and ``threads`` None or a positive int."""
    if augment_on not in PLACEMENTS:
        raise UserValueError(f"DataLoader: augment_on={augment_on!r} must be 'auto', 'device' "
                             "or 'workers'")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)):
        raise UserTypeError(f"DataLoader: threads={threads!r} must be a positive int or None")
    if threads is not None and threads < 1:
        raise UserValueError(f"DataLoader: threads={threads} must be at least 1 (or None: fit "
                             "the cores)")


def in_workers(augment_on: str, accelerator: bool, num_workers: int) -> bool:
    """Whether the pipeline runs where batches are assembled (module doc).

    Raises:
        UserValueError: ``NPU_DATA_AUGMENT_ON`` is set to something else than a placement.
    """
    if augment_on == "auto":
        chosen = os.environ.get(PLACEMENT_ENV, "").strip().lower() or "auto"
        if chosen not in PLACEMENTS:
            raise UserValueError(f"{PLACEMENT_ENV}={chosen!r} must be auto, device or workers "
                                 "— unset it to choose by the device")
        if chosen != "auto":
            return chosen == "workers"
        return not accelerator and num_workers > 0
    return augment_on == "workers"


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def env_threads() -> int | None:
    """``NPU_DATA_THREADS`` as a count (None: unset).

    Raises:
        UserValueError: It is set to something else than a positive integer.
    """
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise UserValueError(f"{THREADS_ENV}={raw!r} must be a positive integer — unset it to "
                             "fit the cores")
    return int(raw)


def worker_threads(threads: int | None, num_workers: int, pipeline_here: bool,
                   accelerator: bool) -> int | None:
    """Intra-op threads of each worker (None: leave torch's 1): ``threads`` (else
    ``NPU_DATA_THREADS``, else ``cores // num_workers``) unless the main process runs the
    pipeline on the CPU beside them."""
    if num_workers <= 0 or (not pipeline_here and not accelerator):
        return None
    given = threads if threads is not None else env_threads()
    return given if given is not None else max(1, cores() // num_workers)


def main_threads(threads: int | None, num_workers: int, pipeline_here: bool,
                 accelerator: bool) -> int | None:
    """The main process's intra-op threads during a pass on the CPU beside workers (None:
    leave them): the cores the workers leave, at least 1 — with the pipeline in the workers
    what their threads leave (the main process still mixes or trains there), else
    ``threads`` (or ``cores - num_workers``) as it runs the pipeline itself."""
    if accelerator or num_workers <= 0:
        return None
    given = threads if threads is not None else env_threads()
    if pipeline_here:
        each = given if given is not None else max(1, cores() // num_workers)
        return max(1, cores() - num_workers * each)
    return given if given is not None else max(1, cores() - num_workers)


def token_of(transform: Any) -> bytes | None:
    """A digest of ``transform``'s pickle (None: it does not pickle, so it cannot run in a
    worker)."""
    try:
        return hashlib.blake2b(pickle.dumps(transform), digest_size=16).digest()
    except Exception:  # noqa: BLE001 - any pickling failure: the main process runs it
        return None


class WorkerPipeline:
    """The keyed pipeline a loader's assembler runs on each batch (module doc). Travels in the
    collate function to the workers; ``token`` is None while the main process runs it."""

    def __init__(self) -> None:
        self.pipeline: Pipeline | None = None
        self.token: bytes | None = None

    @property
    def transform(self) -> Any:
        """The transform it runs (None: the main process runs the pipeline)."""
        return self.pipeline.transform if self.pipeline is not None else None

    def arm(self, pipeline: Pipeline | Any) -> bytes | None:
        """Run ``pipeline`` (the pass's keyed one; a transform is made one) where batches are
        assembled; returns the token its requests carry (None: it cannot travel, the main
        process runs it)."""
        if pipeline is not None and not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.of(pipeline)
        token = token_of(pipeline.transform) if pipeline is not None else None
        self.pipeline, self.token = (pipeline, token) if token is not None else (None, None)
        return token

    def disarm(self) -> None:
        """The main process runs the pipeline."""
        self.pipeline, self.token = None, None

    def runs(self, request: BatchRequest | None) -> bool:
        """Whether this assembler runs the pipeline on the batch read for ``request``."""
        return (self.pipeline is not None and request is not None and request.params is not None
                and request.placed == self.token)

    def run(self, batch: Batch, request: BatchRequest, cropped: bool) -> Batch:
        """The whole keyed pipeline (after the reader's crop when ``cropped``) on a batch
        this assembler built (its kernels may write into its image)."""
        assert self.pipeline is not None
        return self.pipeline.finish(batch, request, cropped, donate=True)
