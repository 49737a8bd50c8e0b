"""Which epoch a loader's next pass serves, how long it is, and its resume state.

Torch's semantics: every pass is a new epoch (new order, new augmentation) unless
``load_state_dict`` asked to resume one; ``set_epoch`` on the loader, or on its order (seen
when the order's epoch changes, or for ours on any call), chooses the epoch and wins. A pass
over an epoch served before is a *repeat* (a new augmentation). How an order is resumed:
``loaders.resume``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from npu_data.loaders import resume
from npu_data.loaders.resume import Pass, PassIndices, epoch_mark, warn_once


def batch_seed(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The transform seed of one batch of a pass: a mix of (seed, epoch, rank, batch number)
    (a transform that draws no keyed parameters gets a generator seeded with it)."""
    x = 0x9E3779B97F4A7C15
    for v in (seed, epoch, rank, batch):
        x = ((x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & ((1 << 63) - 1)


class EpochState:
    """One loader's epochs: ``order`` decides each epoch's samples (``resume.order_of``),
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
        self._resume: resume.Resume | None = None  # load_state_dict(): the next pass continues
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
        epoch = int(epoch)
        self._chosen = self._epoch = epoch
        resume.set_epoch(self.order, epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def length(self, torch_len: Callable[[], int]) -> int:
        """Batches in the epoch (all of them, also while a resumed pass serves the rest)."""
        if self._resume is not None:
            rest = resume.pass_length(self.order, torch_len())
            return rest + (self._resume.batches if self._resume.native else 0)
        p = self.current
        if p is not None and p.active and p.length is not None:
            return p.length
        return torch_len()

    def begin(self, torch_len: Callable[[], int]) -> Pass:
        """Decide the next pass's epoch (``loaders.resume`` for the resume), set the index
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
        resume.set_epoch(order, epoch)
        self._chosen, self._mark, self._epoch = None, epoch_mark(order), epoch
        self._last = (epoch, repeat)
        native = resume.native(order)
        p = Pass(epoch, repeat, base, native=native)
        skip = base if pending is not None and not native else 0
        if self.stream:
            p.discard = skip  # a stream is fast-forwarded by reading (it has no indices)
        else:
            p.skip = self.indices.skip = skip
            if not p.native:
                replay = pending.replay if pending is not None else None
                self.indices.start = functools.partial(resume.snapshot_pass, p, order, replay)
        try:  # the index sampler's length now (an earlier pass may still be held open)
            length: int | None = torch_len()
        except TypeError:  # an iterable dataset without len()
            length = None
        if length is not None:
            length = resume.pass_length(order, length) + (base if native and pending else 0)
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
        head: dict[str, Any] = {"version": resume.LOADER_VERSION}
        if p is None or self._between_epochs(p):
            epoch = self.epoch
            state = {**head, "epoch": epoch, "batches": 0, "repeat": self._repeat(epoch),
                     "seed": seed, "batch_size": batch_size}
            fresh = resume.fresh_state(order, epoch)
            if fresh is not None:
                state["sampler"] = fresh
            return state
        state = {**head, "epoch": p.epoch, "batches": p.base + p.yielded, "repeat": p.repeat,
                 "seed": seed, "batch_size": batch_size}
        if p.native:
            consumed = resume.consumed(order, self.indices.sizes, p.skip + p.yielded)
            state["sampler"] = order.state_dict(consumed=consumed)
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
            length: int | None = None if resume.native(order) else torch_len()
        except TypeError:
            length = None
        pending = resume.read_state(state, order, length, self.stream)
        epoch, batches, replay = pending.epoch, pending.batches, pending.replay
        if not pending.native:
            resume.set_epoch(order, epoch)
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
            resume.set_epoch(order, epoch)
        self._resume = pending
        self._epoch, self._chosen, self._mark = epoch, None, epoch_mark(order)
        return seed if pending.seed is None else pending.seed
