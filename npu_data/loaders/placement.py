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

import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import donating
from npu_data.transforms.read_crop import apply_after_read

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
        self.transform: Any = None
        self.token: bytes | None = None

    def arm(self, transform: Any) -> bytes | None:
        """Run ``transform`` (the pass's keyed one) where batches are assembled; returns the
        token its requests carry (None: it cannot travel, the main process runs it)."""
        token = token_of(transform) if transform is not None else None
        self.transform, self.token = (transform, token) if token is not None else (None, None)
        return token

    def disarm(self) -> None:
        """The main process runs the pipeline."""
        self.transform, self.token = None, None

    def run(self, batch: dict[str, Any], params: dict[str, torch.Tensor],
            cropped: bool) -> dict[str, Any]:
        """The whole keyed pipeline (after the reader's crop when ``cropped``) on a batch
        this assembler built (its kernels may write into its image)."""
        with donating(batch.get("image")):
            return dict(apply_after_read(self.transform, batch, params, cropped))
