"""NpuDistributedSampler: torch's DistributedSampler order, plus exact and elastic resume.

``EpochOrder`` holds the logic; ``NpuDistributedSampler`` is it as a
``torch.utils.data.DistributedSampler`` (an ``isinstance`` match, so Lightning and Accelerate
keep it as the sharding sampler), ``ShuffledOrder`` / ``SequentialOrder`` as torch's
``RandomSampler`` / ``SequentialSampler`` (the one-replica order a ``DataLoader`` makes for
``shuffle=``, which Lightning replaces with a ``DistributedSampler`` under DDP as it does
torch's).

The epoch's global order is a permutation ``P`` of ``range(len(dataset))`` (``randperm`` seeded
with ``seed + epoch``, exactly as torch's sampler; or ``range`` without shuffling; or a
block-local permutation with ``locality_block``). Like torch, the list is padded cyclically
(or truncated with ``drop_last``) to ``total_size`` and rank ``r`` takes positions
``r, r + W, r + 2W, ...``. Reading those positions in order *interleaves* the ranks, so after
every rank consumed ``c`` samples the world has consumed the global prefix ``L[:c * W]``.

Resume (``load_state_dict``) stores that global count (and ``start``: where the current layout
begins in ``P``, 0 except after an elastic resume):
- same world size: each rank continues exactly where it stopped (same order, same padding);
- different world size (elastic): the remainder is the unseen part of the permutation,
  ``P[consumed:]`` (every sample not yet seen, including any the old world would have dropped
  with ``drop_last``); it is split over the new world the way torch splits a full epoch:
  padded cyclically with its own first samples (``drop_last=False``: nothing is lost, at most
  ``W' - 1`` samples repeat) or truncated to a multiple of ``W'`` (``drop_last=True``: at most
  ``W' - 1`` samples are dropped). Nothing already seen is served again except that padding.
A state is checked key by key (types, ranges, version) and carries the dataset's fingerprint
(``loaders.states``): a hand-edited or foreign state is refused with one line.

Shard locality (``shard_window=K``, a dataset with a ``manifest`` such as ``ShardDataset``):
``window_layout`` (below) replaces the layout — shards shuffled, the stream cut into one
contiguous part per rank (so each rank reads mostly whole shards: at most ``W - 1`` shards are
split between two ranks), samples shuffled inside windows of ``K`` consecutive shards of each
part, the parts interleaved so the consumed-prefix rule above still holds. Resume keeps the
chain of layouts of the epoch (``layouts``: ``[begin, world]`` pairs): an elastic resume lays
out exactly the unseen samples again with the same rule over the new world.
The sampler also tells a dataset that has ``prefetch(shards)`` (a remote ``ShardDataset``)
which shards this rank reads next, as it enters each one. Window layouts cost a remote dataset
fewer downloads: with a uniform shuffle every rank touches every shard each epoch. The
randomness lost: a batch mixes samples from at most ``K`` (+1 at a window edge) shards, and
which shards meet in a window changes every epoch.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import DistributedSampler, RandomSampler, Sampler, SequentialSampler

from npu_data.common.dist import place
from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.loaders.states import (
    MAX_EPOCH,
    Fields,
    check_fingerprint,
    checked_epoch,
    checked_seed,
    fingerprint,
)
from npu_data.shards.repeats import repeats_of, virtual_ids

_STATE_VERSION = 2  # 2: the dataset's fingerprint
_READS = (1, 2)  # versions load_state_dict reads
PREFETCH_LOOKAHEAD = 8  # upcoming shards handed to ``dataset.prefetch`` at each shard change


# --- shard-local layouts (shard_window=K; module doc) ---
_NO_DEFAULT: Any = object()


def per_rank_count(n: int, world: int, drop_last: bool) -> int:
    """Samples each of ``world`` ranks gets from ``n``, as torch's DistributedSampler counts
    (the tail dropped with ``drop_last``, else padded)."""
    if drop_last and n % world != 0:
        return math.ceil((n - world) / world)
    return math.ceil(n / world)


def shard_starts(dataset: Any, default: Any = _NO_DEFAULT) -> np.ndarray | None:
    """(shards + 1,) int64 first dataset index of every shard, from ``dataset.manifest``."""
    manifest = getattr(dataset, "manifest", None)
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not isinstance(shards, list):
        if default is not _NO_DEFAULT:
            return default  # type: ignore[no-any-return]
        raise UserTypeError(f"shard_window: {type(dataset).__name__} lists no shards — use a "
                            "ShardDataset (or LabelStudioDataset), or drop shard_window")
    counts = np.array([int(s["samples"]) for s in shards], dtype=np.int64)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    if int(starts[-1]) != len(dataset):
        if default is not _NO_DEFAULT:
            return default  # type: ignore[no-any-return]
        raise UserError(f"shard_window: the manifest lists {int(starts[-1])} samples but the "
                        f"dataset has {len(dataset)} — use the ShardDataset itself")
    return starts


def _generator(seed: int, epoch: int, begin: int, world: int) -> torch.Generator:
    """Draws of one layout: (seed, epoch) for the shard order, plus where the layout begins
    and its world size for the windows (an elastic layout draws anew, reproducibly)."""
    key = hashlib.blake2b(f"{seed}:{epoch}:{begin}:{world}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(key, "little") >> 1)


def window_layout(left: np.ndarray, starts: np.ndarray, world: int, window: int,
                  drop_last: bool, seed: int, epoch: int, begin: int,
                  shuffle: bool = True) -> np.ndarray:
    """The interleaved global list (rank ``r`` takes ``[r::world]``) over the samples ``left``
    (ascending dataset indices not yet seen this epoch), padded cyclically or truncated
    (``drop_last``) to a multiple of ``world`` like torch's sampler."""
    nshards, n_samples = len(starts) - 1, int(starts[-1])
    phys = left % n_samples if n_samples else left  # a repeat's virtual id: its sample's shard
    shard = np.searchsorted(starts, phys, side="right") - 1
    if shuffle:
        g = torch.Generator().manual_seed(seed + epoch)  # the epoch's shard order
        pos = np.empty(nshards, dtype=np.int64)
        pos[torch.randperm(nshards, generator=g).numpy()] = np.arange(nshards)
        order = np.argsort(pos[shard], kind="stable")  # by shard position, then index
        stream, shard = left[order], shard[order]
    else:
        stream = left
    n = len(stream)
    per_rank = per_rank_count(n, world, drop_last)
    total = per_rank * world
    if n == 0 or total == 0:
        return stream[:0]
    take = np.arange(total) % n  # cyclic padding with the stream's first samples
    stream, shard = stream[take], shard[take]
    parts = stream.reshape(world, per_rank).copy()
    if shuffle:
        g = _generator(seed, epoch, begin, world)
        sh = shard.reshape(world, per_rank)
        for r in range(world):
            change = np.r_[0, np.cumsum(sh[r, 1:] != sh[r, :-1])]  # shard run number
            key = (change // window).astype(np.float64)
            key += torch.rand(per_rank, generator=g, dtype=torch.float64).numpy()
            parts[r] = parts[r][np.argsort(key, kind="stable")]
    return parts.T.reshape(-1)


def epoch_permutation(n: int, epoch: int, seed: int, shuffle: bool,
                      locality_block: int | None = None) -> np.ndarray:
    """The epoch's global order ``P`` (int64): torch's ``randperm(n)`` seeded ``seed + epoch``.

    With ``locality_block=K`` the blocks ``[0, K), [K, 2K), ...`` are shuffled, then the
    indices inside each block, so consecutive samples stay near each other on disk.
    """
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    if not locality_block or locality_block <= 1:
        return torch.randperm(n, generator=g).numpy().astype(np.int64, copy=False)
    k = int(locality_block)
    nblocks = -(-n // k)
    block_pos = torch.empty(nblocks, dtype=torch.float64)
    block_pos[torch.randperm(nblocks, generator=g)] = torch.arange(nblocks, dtype=torch.float64)
    key = block_pos[torch.arange(n) // k] + torch.rand(n, generator=g, dtype=torch.float64)
    return torch.argsort(key).numpy().astype(np.int64, copy=False)


def layout(order: np.ndarray, world: int, drop_last: bool) -> np.ndarray:
    """Pad cyclically (or truncate with ``drop_last``) to a multiple of ``world`` like torch."""
    n = len(order)
    total = per_rank_count(n, world, drop_last) * world
    if drop_last or n == 0:
        return order[:total]
    return np.resize(order, total)


class EpochOrder(Sampler[int]):
    """The epoch orders of ``NpuDistributedSampler`` (the class doc there), resumable."""

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 locality_block: int | None = None, shard_window: int | None = None) -> None:
        seed = checked_seed(seed, type(self).__name__)
        env_rank, env_world, _ = place()
        num_replicas = env_world if num_replicas is None else num_replicas
        rank = env_rank if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"Invalid num_replicas {num_replicas}, it should be >= 1")
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        if locality_block is not None and locality_block < 1:
            raise UserValueError(
                f"locality_block={locality_block}: use a positive block size or None"
            )
        if shard_window is not None:
            if shard_window < 1:
                raise UserValueError(
                    f"shard_window={shard_window}: use a positive number of shards "
                    "or None"
                )
            if locality_block is not None:
                raise UserValueError("shard_window and locality_block both given: choose one (the "
                                     "shard window already keeps each rank on a few shards)")
        self._starts = shard_starts(dataset) if shard_window is not None else None
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.locality_block = locality_block
        self.shard_window = shard_window
        # (epoch, start of the layout in P, global consumed, world size of that layout,
        #  the epoch's layouts as (begin, world) pairs — shard_window only)
        self._resume: tuple[int, int, int, int, tuple[tuple[int, int], ...]] | None = None
        self._yielded = 0
        self._pass: tuple[int, int, int] | None = None  # (epoch, consumed before, start)
        self._layouts: tuple[tuple[int, int], ...] = ()  # of the last _global_list
        self._pass_layouts: tuple[tuple[int, int], ...] = ()  # of the current pass
        self.epoch_calls = 0  # set_epoch calls: a DataLoader sees an epoch chosen again
        self._fingerprint: str | None = None
        # the last chain replayed: (seed, epoch, drop_last, shuffle), the chain, the samples
        # left before its last layout, that layout in full
        self._memo: tuple[tuple[int, int, bool, bool], tuple[tuple[int, int], ...],
                          np.ndarray, np.ndarray] | None = None
        self._ids: np.ndarray | None | bool = False  # the epoch's virtual ids (False: unread)

    def _virtual(self) -> np.ndarray | None:
        """The ascending virtual ids of an epoch of a dataset with ``repeats`` (sample ``i``'s
        ``r``-th repeat is ``i + n * r``, ``shards.repeats``), else None (read once)."""
        if self._ids is False:
            reps = repeats_of(self.dataset)
            self._ids = None if reps is None else virtual_ids(reps)
        return self._ids  # type: ignore[return-value]

    def _count(self) -> int:
        """Items an epoch lays out: the dataset's samples, each as often as it repeats."""
        ids = self._virtual()
        return len(self.dataset) if ids is None else len(ids)

    # --- the epoch's layout -------------------------------------------------------------
    def _global_list(self) -> tuple[np.ndarray, int, int]:
        """(remaining interleaved global list, consumed before it, start of the layout in P)."""
        n = self._count()
        if self._starts is not None:
            return self._window_list(n)
        order = epoch_permutation(n, self.epoch, self.seed, self.shuffle, self.locality_block)
        ids = self._virtual()
        if ids is not None:  # the permutation of the epoch's list of virtual ids
            order = ids[order]
        resume = self._resume
        if resume is None or resume[0] != self.epoch:
            return layout(order, self.num_replicas, self.drop_last), 0, 0
        _, start, consumed, old_world, _ = resume
        if old_world == self.num_replicas:
            full = layout(order[start:], old_world, self.drop_last)
            return full[consumed - start:], consumed, start
        start = min(consumed, n)
        return layout(order[start:], self.num_replicas, self.drop_last), consumed, start

    def _window_list(self, n: int) -> tuple[np.ndarray, int, int]:
        """``_global_list`` with ``shard_window``: the epoch's layouts replayed in turn, each
        over the samples its predecessors left unseen."""
        resume = self._resume
        chain: tuple[tuple[int, int], ...]
        if resume is None or resume[0] != self.epoch:
            chain, consumed = ((0, self.num_replicas),), 0
        else:
            _, _, consumed, old_world, chain = resume
            if old_world != self.num_replicas:
                chain = (*chain, (consumed, self.num_replicas))
        full = self._replay(chain)
        self._layouts = chain
        begin = chain[-1][0]
        return full[consumed - begin:], consumed, begin

    def _replay(self, chain: tuple[tuple[int, int], ...],
                fields: Fields | None = None) -> np.ndarray:
        """The last layout of ``chain`` in full, each earlier one laid out over the samples its
        predecessors left unseen and cut where the next begins (``fields``: a state whose
        chain is checked: no layout may begin past the end of the one before). The last
        replay is kept: the same chain, or one more layout, costs one layout at most."""
        assert self._starts is not None and self.shard_window is not None
        draws = (self.seed, self.epoch, self.drop_last, self.shuffle)
        ids = self._virtual()
        left: np.ndarray = np.arange(len(self.dataset), dtype=np.int64) if ids is None else ids
        i, full = 0, None
        memo = self._memo
        if memo is not None and memo[0] == draws and chain[:len(memo[1])] == memo[1]:
            if len(memo[1]) == len(chain):
                return memo[3]
            i, left, full = len(memo[1]) - 1, memo[2], memo[3]
        while True:
            begin, world = chain[i]
            if full is None:
                full = window_layout(left, self._starts, world, self.shard_window,
                                     self.drop_last, self.seed, self.epoch, begin, self.shuffle)
            if i == len(chain) - 1:
                self._memo = (draws, chain, left, full)
                return full
            step = chain[i + 1][0] - begin
            if fields is not None and step > len(full):
                raise fields.fail(f"layouts[{i + 1}]", f"begins {step} samples after "
                                  f"layouts[{i}], past its end ({len(full)} samples)")
            left, full, i = left[~np.isin(left, full[:step])], None, i + 1

    @property
    def num_samples(self) -> int:
        """Samples this rank yields in the current (possibly resumed) epoch."""
        return len(self._global_list()[0]) // self.num_replicas

    @property
    def total_size(self) -> int:
        """Samples all ranks yield together in the current epoch."""
        return self.num_samples * self.num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        remaining, before, start = self._global_list()
        # A pending resume is used by exactly one pass; later passes serve whole epochs.
        self._resume = None
        self._pass = (self.epoch, before, start)
        self._pass_layouts = self._layouts
        mine_arr = remaining[self.rank::self.num_replicas]
        mine = mine_arr.tolist()
        self._yielded = 0
        hook = getattr(self.dataset, "prefetch", None)
        starts = self._starts if self._starts is not None else shard_starts(self.dataset, None)
        if not callable(hook) or starts is None or not len(mine):
            for i in mine:
                self._yielded += 1
                yield i
            return
        n = len(self.dataset)
        shard = np.searchsorted(starts, mine_arr % n if n else mine_arr, side="right") - 1
        change = np.flatnonzero(np.r_[True, shard[1:] != shard[:-1]])
        runs = shard[change]
        entering = dict(zip(change.tolist(), range(len(change)), strict=True))
        for pos, i in enumerate(mine):
            j = entering.get(pos)
            if j is not None:  # this rank enters a shard: the next ones can download now
                hook(runs[j:j + PREFETCH_LOOKAHEAD].tolist())
            self._yielded += 1
            yield i

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch (the shuffle seed is ``seed + epoch``), as torch's sampler."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) \
                or not 0 <= epoch <= MAX_EPOCH:  # states.checked_epoch's rule, inline: per pass
            checked_epoch(epoch, f"{type(self).__name__}.set_epoch", MAX_EPOCH)
        epoch = int(epoch)
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        self.epoch = epoch
        self.epoch_calls += 1

    def place(self, num_replicas: int, rank: int) -> None:
        """Serve ``rank`` of ``num_replicas`` from the next pass (a framework's world)."""
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.num_replicas, self.rank = int(num_replicas), int(rank)

    def fresh_state(self, epoch: int) -> dict[str, Any]:
        """``state_dict()`` of the start of ``epoch``: nothing consumed yet."""
        state = self.state_dict(consumed=0)
        state.update(epoch=int(epoch), consumed=0, start=0)
        if "layouts" in state:
            state["layouts"] = [[0, int(self.num_replicas)]]
        return state

    # --- resume -------------------------------------------------------------------------
    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """Plain state: epoch, seed, samples consumed globally in this epoch, world size.

        ``consumed`` is the number of samples THIS rank has consumed in the current pass
        (a DataLoader passes batches × batch size); by default the samples yielded so far.
        All ranks are assumed to have consumed the same number (synchronous training).
        """
        local = self._yielded if consumed is None else int(consumed)
        if self._resume is not None and self._resume[0] == self.epoch:
            _, before, start = self._global_list()  # resumed but not iterated yet
            local = 0 if consumed is None else local
        elif self._pass is not None and self._pass[0] == self.epoch:
            _, before, start = self._pass
        else:  # nothing served in this epoch yet (a pass of another epoch counts for nothing)
            before, start = 0, 0
            local = 0 if consumed is None else local
        state: dict[str, Any] = {
            "version": _STATE_VERSION,
            "fingerprint": self.fingerprint,
            "epoch": int(self.epoch),
            "seed": int(self.seed),
            "consumed": int(before + local * self.num_replicas),
            "world_size": int(self.num_replicas),
            "start": int(start),
            "dataset_len": len(self.dataset),
            "shuffle": bool(self.shuffle),
            "drop_last": bool(self.drop_last),
            "locality_block": self.locality_block,
        }
        if self.shard_window is not None:
            state["shard_window"] = self.shard_window
            state["layouts"] = [list(x) for x in self._state_layouts()]
        return state

    def _state_layouts(self) -> tuple[tuple[int, int], ...]:
        if self._resume is not None and self._resume[0] == self.epoch:
            self._global_list()
            return self._layouts
        if self._pass is not None and self._pass[0] == self.epoch:
            return self._pass_layouts
        return ((0, self.num_replicas),)

    @property
    def fingerprint(self) -> str:
        """The digest that ties a state to this dataset (``loaders.states.fingerprint``)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.dataset, repeats=repeats_of(self.dataset))
        return self._fingerprint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch with exactly the unseen samples (on any world size).

        Raises:
            UserError: a state of another dataset or sampler configuration, or one whose
                keys are missing, of the wrong type or out of range (nothing is changed).
        """
        n = len(self.dataset)
        f = Fields(state, "sampler state", "pass the state_dict() this sampler saved, as saved")
        saved_len = f.integer("dataset_len", 0, default=n)
        if saved_len != n:
            raise UserError(
                f"sampler state: saved for a dataset of {saved_len} samples but this "
                f"one has {n} — resume with the same dataset"
            )
        if f.version(_READS) >= 2:  # version 1 recorded the length alone
            check_fingerprint(f, self.fingerprint)
        elif self._virtual() is not None:
            raise UserError("sampler state: version 1 records no fingerprint, and this dataset "
                            "repeats samples (task data 'repeats') — resume from the start of "
                            "the epoch (set_epoch) with a state this npu-data saved")
        n = self._count()  # positions count the epoch's items, repeats included
        for key in ("shuffle", "locality_block", "shard_window", "drop_last"):
            if state.get(key) != getattr(self, key) and (key in state or key == "shard_window"):
                raise UserError(
                    f"sampler state: saved with {key}={state.get(key)!r} but this sampler has "
                    f"{key}={getattr(self, key)!r} — construct it with the saved value"
                )
        seed, epoch = f.seed_and_epoch()
        world = f.integer("world_size", 1)
        chain: tuple[tuple[int, int], ...]
        if self.shard_window is None:
            span = per_rank_count(n - f.integer("start", 0, n, default=0), world,
                                  self.drop_last) * world
            start, consumed = f.position(n, world, span)
            chain = ((0, world),)
        else:
            chain = f.layouts()
            if chain[-1][1] != world:
                raise f.fail("layouts", f"ends with world_size {chain[-1][1]}, not the state's "
                             f"world_size={world}")
            begin = chain[-1][0]
            # a layout followed by one that begins at the same sample served nothing
            chain = (*(c for c, d in zip(chain, chain[1:], strict=False) if d[0] > c[0]),
                     chain[-1])
            if f.integer("start", 0, default=begin) != begin:
                raise f.fail("start", f"={state['start']!r} is not where the last layout "
                             f"begins ({begin})")
            saved = self.seed, self.epoch
            self.seed, self.epoch = seed, epoch  # the replay draws with the state's
            try:
                full = self._replay(chain, f)
                start, consumed = f.position(begin + len(full), world, len(full))
            finally:
                self.seed, self.epoch = saved
        self.seed, self.epoch = seed, epoch
        self._resume = (epoch, start, consumed, world, chain)
        self._yielded = 0


class NpuDistributedSampler(EpochOrder, DistributedSampler):  # type: ignore[misc,override]
    """Drop-in for ``torch.utils.data.DistributedSampler`` with ``state_dict`` resume.

    Same arguments, ``set_epoch``, order, padding and dropping as torch's sampler (see the
    module docstring for resume and elastic semantics), and a subclass of it, so Lightning
    and Accelerate keep it rather than wrapping it in another sharding sampler. Create it
    after the process group exists (e.g. in Lightning's ``train_dataloader()``).

    Args:
        dataset: The dataset to sample (its ``len``; a ``manifest`` for ``shard_window``,
            ``prefetch(shards)`` to be told which shards come next).
        num_replicas: Ranks in the world; default ``torch.distributed``'s world size, then
            the launcher's ``WORLD_SIZE``, then 1.
        rank: This process's rank; default ``torch.distributed``'s, then ``RANK``, then 0.
        shuffle: Permute every epoch (``randperm`` seeded ``seed + epoch``, as torch does).
        seed: Base seed of the permutations; the same on every rank. An int from -2**63 to
            2**64 - 1 (what ``torch.Generator.manual_seed`` takes).
        drop_last: Truncate the epoch to a multiple of the world size instead of padding it
            with repeated samples.
        locality_block: Shuffle blocks of this many neighbouring indices, then inside the
            blocks (fewer random disk reads); None: torch's order.
        shard_window: Hand each rank mostly whole shards of a ``ShardDataset``, shuffled
            inside windows of this many shards (fewer shards downloaded per node, less
            randomness); None: torch's order. Not together with ``locality_block``.

    Raises:
        ValueError: ``num_replicas`` below 1 or ``rank`` outside ``[0, num_replicas)`` (as
            torch's sampler).
        UserError: ``locality_block`` or ``shard_window`` below 1, or both given; a
            ``seed`` that is not an int (a float, a bool) or out of range.
    """


class ShuffledOrder(EpochOrder, RandomSampler):  # type: ignore[misc]
    """A ``DataLoader(shuffle=True)``'s own order: one replica, a ``seed + epoch``
    permutation per epoch, resumable; a ``RandomSampler`` to frameworks (Lightning shards a
    loader that shuffles with a ``DistributedSampler(shuffle=True)``)."""

    def __init__(self, dataset: Sized, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)
        self.data_source, self.replacement, self._num_samples = dataset, False, None
        self.generator = None  # the order never reads it (a framework may set one)


class SequentialOrder(EpochOrder, SequentialSampler):  # type: ignore[misc]
    """A ``DataLoader(shuffle=False)``'s own order: ``range(len(dataset))``, resumable; a
    ``SequentialSampler`` to frameworks."""

    def __init__(self, dataset: Sized, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=False, seed=seed)
        self.data_source = dataset


def loader_order(dataset: Sized, shuffle: bool, seed: int) -> EpochOrder:
    """The order a ``DataLoader`` without a sampler uses (``ShuffledOrder`` or
    ``SequentialOrder``)."""
    return ShuffledOrder(dataset, seed) if shuffle else SequentialOrder(dataset, seed)
