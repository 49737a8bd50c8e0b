"""How a ``DataLoader`` resumes any sampler: natively, by snapshot + fast-forward, or as
best it can (and says so once).

The loader's *order* is the object that decides which samples an epoch serves, in which
order (``order_of``): a batch sampler that keeps its own state (``set_epoch`` or
``state_dict``), else the sampler (a torch ``BatchSampler``'s inner one), else an iterable
dataset with ``set_epoch``.

- ``EpochOrder`` (``NpuDistributedSampler``, the loader's own order) resumes natively:
  its ``state_dict(consumed=...)`` holds the samples the world consumed, and it serves exactly
  the rest on any world size.
- Any other order is resumed the way torchdata's ``StatefulDataLoader`` resumes a plain
  sampler: a *snapshot* taken right before each pass starts iterating it (``capture``), and
  on resume that snapshot restored (``restore``) and the batches already yielded skipped
  without reading them (``PassIndices``). A snapshot is the object's own ``state_dict()``
  when it has ``state_dict``/``load_state_dict`` (the duck-typed protocol, e.g.
  ``BucketBatchSampler``), a ``DistributedSampler``'s epoch (and Lightning's wrapped
  sampler's snapshot), a ``torch.Generator``'s state (``RandomSampler(generator=g)``), the
  epoch of anything with ``set_epoch``, or nothing for a fixed order (``SequentialSampler``,
  a list, a range). When the order cannot be re-created — no generator, another world size,
  another batch size, unknown type — the loader still resumes (the same number of batches
  skipped, so the epoch keeps its length) and warns once with the reason.
"""

from __future__ import annotations

import base64
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from npu_data.loaders.sampler import EpochOrder

_warned: set[str] = set()
_warn_lock = threading.Lock()
_RANDOM = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def warn_once(message: str) -> None:
    """``warnings.warn(message)`` the first time this process sees ``message``."""
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(message, UserWarning, stacklevel=3)


def stateful(obj: Any) -> bool:
    """``obj`` keeps its own resumable state (``state_dict`` and ``load_state_dict``)."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None))


def order_of(sampler: Any, batch_sampler: Any, dataset: Any) -> Any:
    """The object that owns the epoch's order (see the module doc)."""
    if isinstance(dataset, IterableDataset):
        return dataset
    if batch_sampler is not None and (hasattr(batch_sampler, "set_epoch")
                                      or stateful(batch_sampler)):
        return batch_sampler
    inner = getattr(batch_sampler, "sampler", None)
    return inner if inner is not None else sampler


def wrapped(order: Any) -> Any:
    """The sampler Lightning's ``DistributedSamplerWrapper`` shards (None for others)."""
    if isinstance(order, DistributedSampler):
        return getattr(getattr(order, "dataset", None), "_sampler", None)
    return None


def epoch_mark(order: Any) -> tuple[Any, Any]:
    """What tells that someone chose the order's epoch: its value, and (for ours) how many
    times ``set_epoch`` was called."""
    return getattr(order, "epoch", None), getattr(order, "epoch_calls", None)


def set_epoch(order: Any, epoch: int) -> None:
    """``order.set_epoch(epoch)``, and the wrapped sampler's (Lightning's wrapper keeps it
    at its first epoch otherwise)."""
    if callable(getattr(order, "set_epoch", None)):
        order.set_epoch(epoch)
    inner = wrapped(order)
    if inner is not None and callable(getattr(inner, "set_epoch", None)):
        inner.set_epoch(epoch)


# --- snapshots -------------------------------------------------------------------------------
def capture(order: Any) -> tuple[dict[str, Any], str | None]:
    """A plain-data snapshot that re-creates ``order``'s next pass, and why it cannot when it
    cannot (None when exact)."""
    name = type(order).__name__
    try:
        if stateful(order) and not isinstance(order, EpochOrder):
            return {"state": order.state_dict()}, None
        if isinstance(order, DistributedSampler):
            snap: dict[str, Any] = {"epoch": int(order.epoch), "world": int(order.num_replicas)}
            inner = wrapped(order)
            if inner is None:
                return snap, None
            snap["inner"], why = capture(inner)
            return snap, why
        generator = getattr(order, "generator", None)
        if isinstance(generator, torch.Generator):
            state = bytes(generator.get_state().numpy().tobytes())
            return {"generator": base64.b64encode(state).decode("ascii")}, None
        if isinstance(order, _RANDOM):
            return {}, (f"{name} draws its order from torch's global random state (no "
                        "generator=)")
        if isinstance(order, EpochOrder) or hasattr(order, "epoch"):
            return {"epoch": int(order.epoch)}, None
        if isinstance(order, (SequentialSampler, range, Sequence)):
            return {}, None
        if isinstance(order, BatchSampler):
            return capture(order.sampler)
        return {}, f"{name} has no state_dict()/load_state_dict() to re-create its order"
    except Exception as exc:  # a checkpoint never dies of a sampler: resume as best we can
        return {}, f"{name}.state_dict() failed ({type(exc).__name__}: {exc})"


def restore(order: Any, snap: dict[str, Any]) -> str | None:
    """Put ``order`` back where ``snap`` was taken; why it is not exact (None when it is)."""
    name = type(order).__name__
    if "state" in snap:
        if not stateful(order):
            return f"the state was saved from a sampler with state_dict(), not this {name}"
        order.load_state_dict(snap["state"])
        return None
    if "epoch" in snap:
        set_epoch(order, int(snap["epoch"]))
    why = None
    if "world" in snap and int(snap["world"]) != int(getattr(order, "num_replicas", -1)):
        why = (f"{name} was saved on {snap['world']} replicas and resumes on "
               f"{getattr(order, 'num_replicas', '?')} (NpuDistributedSampler resumes "
               "elastically)")
    if "inner" in snap:
        inner = wrapped(order)
        why = why or (restore(inner, snap["inner"]) if inner is not None else
                      f"{name} no longer wraps a sampler")
    if "generator" in snap:
        generator = getattr(order, "generator", None)
        if not isinstance(generator, torch.Generator):
            return f"{name} has no generator to restore"
        raw = base64.b64decode(snap["generator"])
        generator.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    return why


# --- the loader's index sampler ------------------------------------------------------------
class PassIndices:
    """The loader's index sampler (one per loader: torch's persistent-worker iterator keeps
    the one of its first pass): the real one's batches, with per-pass hooks set by the
    loader — ``start`` runs right before the real one is iterated (restore, snapshot),
    ``skip`` batches are dropped unread (fast-forward) — and ``sizes``, the number of
    samples in each batch handed out this pass."""

    def __init__(self, indices: Any) -> None:
        self.indices = indices
        self.skip = 0
        self.start: Any = None
        self.sizes: list[int] = []

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[Any]:
        skip, start = self.skip, self.start
        self.skip, self.start = 0, None
        sizes: list[int] = []
        self.sizes = sizes
        if start is not None:
            start()
        it = iter(self.indices)
        for _ in range(skip):
            if next(it, _END) is _END:
                return
        for batch in it:
            sizes.append(len(batch) if hasattr(batch, "__len__") else 1)
            yield batch


_END = object()


# --- the loader's passes ----------------------------------------------------------------------
@dataclass
class Pass:
    """One pass over the loader: its epoch, where it stands, how it resumes."""

    epoch: int
    repeat: int  # earlier passes over the same epoch (a new augmentation each)
    base: int  # batches of the epoch yielded before this pass (it resumes)
    native: bool = False  # the order is an EpochOrder that resumes itself
    skip: int = 0  # batches the index sampler skipped (fast-forward)
    discard: int = 0  # batches read and dropped (a resumed stream)
    yielded: int = 0
    length: int | None = None  # len() of the loader during this pass
    active: bool = True
    finished: bool = False
    snapshot: dict[str, Any] | None = None  # re-creates the order's pass (not native)
    inexact: str | None = None  # why the snapshot cannot re-create it


@dataclass
class Resume:
    """A loaded state the next pass continues."""

    epoch: int
    batches: int
    repeat: int
    native: bool
    replay: dict[str, Any] | None
    state: dict[str, Any]


def snapshot_pass(p: Pass, order: Any, replay: dict[str, Any] | None) -> None:
    """Right before a pass iterates its (not native) order: restore a resumed pass's
    snapshot, then take this pass's."""
    why = restore(order, replay) if replay is not None else None
    if why:
        warn_once(f"DataLoader: the resume is not exact — {why}")
    p.snapshot, p.inexact = capture(order)
    p.inexact = why or p.inexact
