"""Which epoch a loader's next pass serves, how long it is, and its resume state.

Torch's semantics: every pass is a new epoch (new order, new augmentation) unless
``load_state_dict`` asked to resume one; ``set_epoch`` on the loader, or on its order (seen
when the order's epoch changes, or for ours on any call), chooses the epoch and wins. A pass
over an epoch served before is a *repeat* (a new augmentation).

**Resume**: how a ``DataLoader`` resumes any sampler: natively, by snapshot + fast-forward,
or as best it can (and says so once).

The loader's *order* is the object that decides which samples an epoch serves, in which
order (``order_of``): a batch sampler that keeps its own state (``set_epoch`` or
``state_dict``), else the sampler (a torch ``BatchSampler``'s inner one), else an iterable
dataset with ``set_epoch``.

- ``EpochOrder`` (``NpuDistributedSampler``, the loader's own order) and
  ``BucketBatchSampler`` resume natively: their ``state_dict(consumed=...)`` holds what the
  world consumed (samples, or batches of any length), and they serve exactly the rest on any
  world size. The loader's state carries theirs, checked (``loaders.states``) before anything
  changes.
- Any other order is resumed the way torchdata's ``StatefulDataLoader`` resumes a plain
  sampler: a *snapshot* taken right before each pass starts iterating it (``capture``), and
  on resume that snapshot restored (``restore``) and the batches already yielded skipped
  without reading them (``PassIndices``). A snapshot is the object's own ``state_dict()``
  when it has ``state_dict``/``load_state_dict`` (the duck-typed protocol, e.g.
  torchdata's samplers), a ``DistributedSampler``'s epoch (and Lightning's wrapped
  sampler's snapshot), a ``torch.Generator``'s state (``RandomSampler(generator=g)``), the
  epoch of anything with ``set_epoch``, or nothing for a fixed order (``SequentialSampler``,
  a list, a range). When the order cannot be re-created — no generator, another world size,
  another batch size, unknown type — the loader still resumes (the same number of batches
  skipped, so the epoch keeps its length) and warns once with the reason.

Loader states: version 3; version 2 (a ``BucketBatchSampler`` snapshot replayed) loads when
nothing of its epoch was served yet and is refused mid-epoch; version 1 (no ``version`` key,
an ``NpuDistributedSampler`` state) loads exactly.
"""

from __future__ import annotations

import base64
import functools
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
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

from npu_data.errors import UserError, UserValueError
from npu_data.loaders.bucket_sampler import BucketBatchSampler
from npu_data.loaders.sampler import EpochOrder
from npu_data.loaders.states import (
    LAST_EPOCH,
    MAX_EPOCH,
    SEED_MAX,
    Fields,
    checked_epoch,
    loader_seed,
)

LOADER_VERSION = 3  # 3: a BucketBatchSampler's own state; 2: its snapshot replayed
_LOADER_READS = (1, 2, 3)  # 1: states before versions (no key)
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
    seed: int | None = None  # the state's (its low 63 bits); None: it has none


def snapshot_pass(p: Pass, order: Any, replay: dict[str, Any] | None) -> None:
    """Right before a pass iterates its (not native) order: restore a resumed pass's
    snapshot, then take this pass's."""
    why = restore(order, replay) if replay is not None else None
    if why:
        warn_once(f"DataLoader: the resume is not exact — {why}")
    p.snapshot, p.inexact = capture(order)
    p.inexact = why or p.inexact


# --- native orders ---------------------------------------------------------------------------
def native(order: Any) -> bool:
    """``order`` resumes itself exactly, on any world size, from a state that counts what the
    world consumed (``EpochOrder``, ``BucketBatchSampler``)."""
    return isinstance(order, EpochOrder | BucketBatchSampler)


def consumed(order: Any, sizes: Sequence[int], batches: int) -> int:
    """What ``order.state_dict(consumed=)`` counts for this rank's first ``batches`` batches
    of the pass (of ``sizes`` samples each): batches for a batch sampler, else samples."""
    return batches if isinstance(order, BucketBatchSampler) else sum(sizes[:batches])


def pass_length(order: Any, length: int) -> int:
    """Batches the next pass yields: torch's ``length`` (from a sampler's samples left), or
    a batch sampler's batches left."""
    return order.left() if isinstance(order, BucketBatchSampler) else length


def fresh_state(order: Any, epoch: int) -> dict[str, Any] | None:
    """A native order's state at the start of ``epoch`` (None for other orders)."""
    if isinstance(order, EpochOrder):
        return order.fresh_state(epoch)
    if isinstance(order, BucketBatchSampler):
        return {**order.state_dict(), "epoch": int(epoch), "consumed": 0, "start": 0,
                "world_size": int(order.num_replicas)}
    return None


def read_state(state: Any, order: Any, length: int | None, stream: bool) -> Resume:
    """A ``DataLoader`` state checked (one line naming the key and the fix; nothing changed
    before it passes) and, for a native order, loaded into it. ``length``: the loader's
    batches in the epoch (None: unknown); ``stream``: an iterable dataset."""
    f = Fields(state, "DataLoader state", "pass the state_dict() this loader saved, as saved")
    version = f.version(_LOADER_READS, default=1)
    epoch = f.integer("epoch", 0, MAX_EPOCH)
    batches = f.integer("batches", 0, default=0)
    repeat = f.integer("repeat", 0, (1 << 31) - 1, default=0)
    seed = None if "seed" not in state else loader_seed(f.integer("seed", 0, SEED_MAX),
                                                        "DataLoader state")
    f.optional_integer("batch_size", 1)
    sampler = f.mapping("sampler") if state.get("sampler") is not None else None
    replay = f.mapping("replay") if state.get("replay") is not None else None
    if native(order):
        if sampler is not None:
            if ("buckets" in sampler) != isinstance(order, BucketBatchSampler):
                saved = "BucketBatchSampler" if "buckets" in sampler else "NpuDistributedSampler"
                raise UserError(f"DataLoader state: saved with a {saved}, this loader's order "
                                f"is a {type(order).__name__} — construct the loader as it was "
                                "saved")
            if sampler.get("epoch") != epoch:
                raise f.fail("sampler", f"is of epoch {sampler.get('epoch')!r}, the loader's "
                             f"of epoch {epoch}")
            consumed = sampler.get("consumed")  # the world's, at least this rank's batches
            if isinstance(consumed, int) and 0 <= consumed < batches:
                raise f.fail("batches", f"={batches} is more than the sampler state's consumed="
                             f"{consumed}")
            order.load_state_dict(dict(sampler))  # checks it, then loads it
        elif batches:
            why = ("saved by an earlier npu-data that replayed this sampler's snapshot" if
                   replay is not None and version < 3 else "has no sampler state")
            raise UserError(f"DataLoader state: {why}, {batches} batches into epoch {epoch} — "
                            f"resume from the start of that epoch (set_epoch({epoch})) or of "
                            "the next one")
        return Resume(epoch, batches, repeat, True, None, dict(state), seed)
    if replay is not None:
        check_replay(Fields(replay, "DataLoader state: replay", f.fix))
    if not stream and length is not None and batches > length:
        raise f.fail("batches", f"={batches} is past the end of the epoch ({length} batches)")
    return Resume(epoch, batches, repeat, False, dict(replay) if replay else None, dict(state),
                  seed)


def check_replay(f: Fields, depth: int = 0) -> None:
    """The keys ``restore`` reads from a snapshot (``capture``), of the types it wrote (a
    wrapped sampler's inside: one level, as Lightning wraps one)."""
    if "type" in f.state and not isinstance(f.state["type"], str):
        raise f.fail("type", f"={f.state['type']!r} is not a class name")
    if "epoch" in f.state:
        f.integer("epoch", 0)
    if "world" in f.state:
        f.integer("world", 1)
    if "state" in f.state:
        f.mapping("state")
    if "generator" in f.state:
        raw = f.state["generator"]
        try:
            base64.b64decode(raw, validate=True)
        except (TypeError, ValueError):
            raise f.fail("generator", "is not a base64 generator state") from None
    if "inner" in f.state:
        if depth >= 2:
            raise f.fail("inner", "nests samplers deeper than a state_dict() does")
        check_replay(Fields(f.mapping("inner"), f"{f.who}.inner", f.fix), depth + 1)


# --- the loader's epochs ---
def batch_seed(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The transform seed of one batch of a pass: a mix of (seed, epoch, rank, batch number)
    (a transform that draws no keyed parameters gets a generator seeded with it)."""
    x = 0x9E3779B97F4A7C15
    for v in (seed, epoch, rank, batch):
        x = ((x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & ((1 << 63) - 1)


class EpochState:
    """One loader's epochs: ``order`` decides each epoch's samples (``order_of``),
    ``indices`` is the loader's index sampler, ``stream`` says the dataset is iterable (it
    resumes by reading). The methods that need torch's length of the next pass take
    ``torch_len`` (torch's ``DataLoader.__len__``: ``TypeError`` when the dataset has none),
    so this object holds no reference to the loader."""

    def __init__(self, order: Any, indices: PassIndices, stream: bool) -> None:
        self.order, self.indices, self.stream = order, indices, stream
        self._epoch = int(getattr(order, "epoch", 0) or 0)
        self._chosen: int | None = None  # set_epoch() on the loader since the last pass began
        self._mark = epoch_mark(order)  # the order's epoch as the loader last left it
        self._last: tuple[int, int] | None = None  # (epoch, repeat) of the last pass begun
        self._resume: Resume | None = None  # load_state_dict(): the next pass continues
        self.current: Pass | None = None  # the last pass begun

    @property
    def epoch(self) -> int:
        """The epoch the next pass serves (a resumed one, one chosen by ``set_epoch``, else
        the one after the last pass)."""
        return self._resume.epoch if self._resume is not None else self._next_epoch()

    def _next_epoch(self) -> int:
        if self._chosen is not None:
            return self._chosen
        mark = epoch_mark(self.order)
        if self._moved(mark):  # its set_epoch was called directly
            return int(mark[0])
        if self._last is not None:
            return self._last[0] + 1
        return int(mark[0]) if mark[0] is not None else self._epoch

    def _moved(self, mark: tuple[Any, Any], other_than: int | None = None) -> bool:
        """The order's epoch was chosen on it since the loader last left it (and is not
        ``other_than``)."""
        return mark != self._mark and mark[0] is not None and (
            other_than is None or int(mark[0]) != other_than)

    def _repeat(self, epoch: int) -> int:
        return self._last[1] + 1 if self._last is not None and self._last[0] == epoch else 0

    def set_epoch(self, epoch: int) -> None:
        """Serve ``epoch`` next; a pending resume of another epoch is dropped."""
        epoch = checked_epoch(epoch, "DataLoader.set_epoch")
        self._chosen = self._epoch = epoch
        set_epoch(self.order, epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def length(self, torch_len: Callable[[], int]) -> int:
        """Batches in the epoch (all of them, also while a resumed pass serves the rest)."""
        if self._resume is not None:
            rest = pass_length(self.order, torch_len())
            return rest + (self._resume.batches if self._resume.native else 0)
        p = self.current
        if p is not None and p.active and p.length is not None:
            return p.length
        return torch_len()

    def begin(self, torch_len: Callable[[], int]) -> Pass:
        """Decide the next pass's epoch (module doc for the resume), set the index
        sampler's hooks and return the pass."""
        order, pending = self.order, self._resume
        self._resume = None
        if pending is not None and self._moved(epoch_mark(order), pending.epoch):
            pending = None  # its set_epoch chose another epoch: it wins
        if pending is not None:
            epoch, repeat, base = pending.epoch, pending.repeat, pending.batches
        else:
            epoch, base = self._next_epoch(), 0
            repeat = self._repeat(epoch)
        if epoch > LAST_EPOCH:  # a loaded state naming the epoch after the last one served
            raise UserValueError(f"DataLoader: epoch={epoch} is out of range — use an integer "
                                 f"from 0 to {LAST_EPOCH}")
        set_epoch(order, epoch)
        self._chosen, self._mark, self._epoch = None, epoch_mark(order), epoch
        self._last = (epoch, repeat)
        resumes_natively = native(order)
        p = Pass(epoch, repeat, base, native=resumes_natively)
        skip = base if pending is not None and not resumes_natively else 0
        if self.stream:
            p.discard = skip  # a stream is fast-forwarded by reading (it has no indices)
        else:
            p.skip = self.indices.skip = skip
            if not p.native:
                replay = pending.replay if pending is not None else None
                self.indices.start = functools.partial(snapshot_pass, p, order, replay)
        try:  # the index sampler's length now (an earlier pass may still be held open)
            length: int | None = torch_len()
        except TypeError:  # an iterable dataset without len()
            length = None
        if length is not None:
            length = pass_length(order, length) + (base if resumes_natively and pending else 0)
        p.length = length
        self.current = p
        return p

    def state_dict(self, seed: int, batch_size: int | None,
                   in_order: bool = True) -> dict[str, Any]:
        """The loader's state (``DataLoader.state_dict``); ``in_order=False``: its workers
        yield out of order (a resume mid-epoch warns that it is not exact)."""
        if self._resume is not None:  # loaded, not iterated yet: the loaded state
            return dict(self._resume.state)
        p, order = self.current, self.order
        head: dict[str, Any] = {"version": LOADER_VERSION}
        if p is None or self._between_epochs(p):
            epoch = self.epoch
            state = {**head, "epoch": epoch, "batches": 0, "repeat": self._repeat(epoch),
                     "seed": seed, "batch_size": batch_size}
            fresh = fresh_state(order, epoch)
            if fresh is not None:
                state["sampler"] = fresh
            return state
        state = {**head, "epoch": p.epoch, "batches": p.base + p.yielded, "repeat": p.repeat,
                 "seed": seed, "batch_size": batch_size}
        if p.native:
            served = consumed(order, self.indices.sizes, p.skip + p.yielded)
            state["sampler"] = order.state_dict(consumed=served)
        elif self.stream:
            state["replay"] = {"type": type(order).__name__, "stream": True}
        else:
            state["replay"] = {"type": type(order).__name__, **(p.snapshot or {})}
            if p.inexact:
                warn_once(f"DataLoader.state_dict: the resume will not be exact — {p.inexact}")
        if not in_order:
            warn_once("DataLoader.state_dict: in_order=False — the batches yielded are not the "
                      "first ones of the epoch, so a resume will not be exact")
        return state

    def _between_epochs(self, p: Pass) -> bool:
        """The last pass is over (all its batches yielded) or another epoch was chosen."""
        done = p.finished or (p.length is not None and p.base + p.yielded >= p.length)
        chosen = self._chosen is not None and self._chosen != p.epoch
        return done or chosen or self._moved(epoch_mark(self.order), p.epoch)

    def load_state_dict(self, state: Mapping[str, Any], batch_size: int | None,
                        torch_len: Callable[[], int], seed: int) -> int:
        """Make the next pass continue the saved epoch with exactly the unseen batches;
        returns the seed to use: the state's (``states.loader_seed``), else ``seed``. Raises
        ``UserError`` as ``DataLoader.load_state_dict`` (nothing is changed)."""
        order = self.order
        try:  # the epoch's batches, to bound a fast-forward
            length: int | None = None if native(order) else torch_len()
        except TypeError:
            length = None
        pending = read_state(state, order, length, self.stream)
        epoch, batches, replay = pending.epoch, pending.batches, pending.replay
        if not pending.native:
            set_epoch(order, epoch)
            why = None
            saved = (replay or {}).get("type", "NpuDistributedSampler")
            if batches and saved != type(order).__name__ and not (self.stream and replay):
                why = f"saved with {saved}, resumed with {type(order).__name__}"
            elif batches and state.get("batch_size", batch_size) != batch_size:
                why = (f"saved with batch_size={state.get('batch_size')}, resumed with "
                       f"{batch_size}")
            if why:
                warn_once(f"DataLoader.load_state_dict: the resume will not be exact — {why}")
                pending.replay = None
        elif state.get("sampler") is None:  # the start of an epoch: its order, nothing to skip
            set_epoch(order, epoch)
        self._resume = pending
        self._epoch, self._chosen, self._mark = epoch, None, epoch_mark(order)
        return seed if pending.seed is None else pending.seed
