"""BucketBatchSampler: aspect-ratio bucketed batches (SDXL, kohya sd-scripts, MindSpeed-MM).

Each sample goes to its bucket (``npu_data.buckets.Buckets``: closest log aspect ratio, or one
inside a small photo with ``no_upscale``), computed from the stored sizes
(``dataset.sizes()``: the shard indices; no pixel is read). An epoch's batches
(deterministic in ``(seed, epoch)``):

1. each bucket's samples in a random order (``randperm`` seeded ``seed + epoch``), cut into
   batches of ``batch_size``; a bucket's last batch is trained short, as kohya does — no
   sample twice in a batch (``drop_last``: dropped); rows of :meth:`epoch_batches` hold -1
   in the unused places of a short batch;
2. all batches in a random order, padded cyclically with whole batches from the first to a
   multiple of the world size (as torch's DistributedSampler pads samples; ``drop_last``:
   truncated) — every rank gets the same number of batches (DDP hangs otherwise), every
   sample is served at least once per epoch unless ``drop_last``;
3. rank ``r`` takes batches ``r, r + W, r + 2W, ...``: after every rank consumed ``c``
   batches, the world consumed the first ``c * W``.

The DataLoader gives the sampler's ``Buckets`` to a ``ResizeCrop(size=None)`` in its
transform (``bind_buckets``), and refuses one built with other buckets.

Resume (``state_dict`` / ``load_state_dict``, the protocol of ``NpuDistributedSampler``):
the same world continues exactly; another world size gets the batches not yet consumed,
laid out again over it (padded or truncated as above; ``start`` records where that layout
begins, so a later resume replays it). ``consumed`` counts batches, whatever their length. A
state is checked key by key and carries the dataset's fingerprint, stored sizes included
(``loaders.states``); our ``DataLoader`` carries it in its own state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from npu_data.buckets import Buckets, BucketSpec, buckets_of
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


def dataset_sizes(dataset: Any, who: str = "BucketBatchSampler") -> np.ndarray:
    """(N, 2) int64 stored (height, width) of every sample: ``dataset.sizes()``
    (``ShardDataset``, ``LabelStudioDataset``), or an (N, 2) array given directly."""
    if isinstance(dataset, np.ndarray | torch.Tensor):
        sizes = np.asarray(dataset)
    else:
        getter = getattr(dataset, "sizes", None)
        if not callable(getter):
            raise UserTypeError(f"{who}: {type(dataset).__name__} has no sizes() — use a "
                                "ShardDataset / LabelStudioDataset, or pass the (N, 2) array of "
                                "(height, width) of its images")
        sizes = np.asarray(getter())
    if sizes.ndim != 2 or sizes.shape[1] != 2:
        raise UserValueError(f"{who}: sizes must be (N, 2) (height, width), got {sizes.shape}")
    return sizes.astype(np.int64)


def _store_targets(dataset: Any, rule: Buckets, sizes: np.ndarray) -> np.ndarray | None:
    """A latents store's samples are already at their bucket (its ``sizes()``): they are
    batched by it, under the store's own list only — another list is refused naming the
    store's. None for any other dataset."""
    record = getattr(dataset, "latents", None)
    if not isinstance(record, dict):
        return None
    stored = sorted(tuple(map(int, b)) for b in record["buckets"])
    if sorted(rule.sizes) != stored:
        given = [list(b) for b in rule.sizes]
        raise UserValueError(
            f"BucketBatchSampler: {getattr(dataset, 'path', 'the store')} was encoded for "
            f"buckets {record['buckets']}, not {rule.describe()} {given} — pass "
            "buckets=dataset.latents['buckets'] (the store's list), or encode the images "
            "again with the run's buckets")
    return sizes


def layout(batches: np.ndarray, world: int, drop_last: bool) -> np.ndarray:
    """``batches`` (T, B) padded cyclically (or truncated with ``drop_last``) to a multiple of
    ``world`` rows, as torch's DistributedSampler does with samples."""
    t = len(batches)
    per_rank = t // world if drop_last else -(-t // world)
    total = per_rank * world
    if drop_last or t == 0:
        return batches[:total]
    return batches[np.arange(total) % t]


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of one aspect-ratio bucket each, split evenly over the ranks (module doc).

    Args:
        dataset: a ``ShardDataset`` / ``LabelStudioDataset`` (``sizes()``), or the (N, 2)
            array of the images' (height, width).
        batch_size: samples per batch.
        buckets: ``"sdxl"`` (SDXL's 1024-px list), ``"kohya"`` (kohya's rule at 1024 px), a
            ``npu_data.Buckets`` (``npu_data.buckets("kohya", 512)``) or a list of
            ``(height, width)``.
        num_replicas: the world size (default: ``torch.distributed``, else ``WORLD_SIZE``).
        rank: this rank (default: ``torch.distributed``, else ``RANK``).
        shuffle: random order inside buckets and of the batches.
        seed: the shuffle seed (the order is ``randperm`` seeded ``seed + epoch``): an int
            from -2**63 to 2**64 - 1, what ``torch.Generator.manual_seed`` takes.
        drop_last: drop short batches and the batches past a multiple of the world size,
            instead of training them short and padding with whole batches.
        no_upscale: a photo smaller than its bucket gets a bucket inside it (kohya's
            ``bucket_no_upscale``).

    Raises:
        UserError: a bad size, bucket list, seed or dataset without sizes.
    """

    def __init__(self, dataset: Any, batch_size: int, buckets: BucketSpec, *,
                 num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 no_upscale: bool = False) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserValueError(f"BucketBatchSampler: batch_size must be a positive int, got "
                                 f"{batch_size!r}")
        seed = checked_seed(seed, "BucketBatchSampler")
        env_rank, env_world, _ = place()
        world = env_world if num_replicas is None else int(num_replicas)
        rank = env_rank if rank is None else int(rank)
        if world < 1 or not 0 <= rank < world:
            raise UserValueError(f"BucketBatchSampler: rank {rank} of {world} replicas — use "
                                 f"0 <= rank < num_replicas")
        self.dataset = dataset
        self.sizes = dataset_sizes(dataset)
        self.rule: Buckets = buckets_of(buckets, no_upscale=bool(no_upscale),
                                        who="BucketBatchSampler")
        self.buckets = self.rule.sizes
        targets = _store_targets(dataset, self.rule, self.sizes)
        if targets is None:
            targets = self.rule.targets(self.sizes)
        extra = sorted({tuple(t) for t in targets.tolist()} - set(self.buckets))
        self.groups: tuple[tuple[int, int], ...] = self.buckets + tuple(extra)  # type: ignore[operator]
        index = {g: i for i, g in enumerate(self.groups)}
        # (N,) the group of each sample: a listed bucket, or (no_upscale) one inside it
        self.bucket_of = np.array([index[tuple(t)] for t in targets.tolist()], np.int64)
        # (N,) each sample's repeats an epoch (task data ``repeats``), None: once each; a
        # repeat is served as its virtual id ``i + N * r`` (``shards.repeats``)
        self.repeats = None if isinstance(dataset, np.ndarray | torch.Tensor) \
            else repeats_of(dataset)
        self._ids = None if self.repeats is None else virtual_ids(self.repeats)
        self.batch_size = batch_size
        self.num_replicas = world
        self.rank = rank
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.epoch = 0
        # (epoch, start of the layout, global batches consumed, world size of that layout)
        self._resume: tuple[int, int, int, int] | None = None
        self._pass: tuple[int, int, int] | None = None  # (epoch, consumed before, start)
        self._yielded = 0
        self._fingerprint: str | None = None

    # --- the epoch's batches ---------------------------------------------------------------
    def epoch_batches(self, epoch: int | None = None) -> np.ndarray:
        """(T, batch_size) int64: every batch of the epoch before the world's padding; -1
        fills the unused places of a bucket's short last batch."""
        g = torch.Generator()
        g.manual_seed(self.seed + (self.epoch if epoch is None else int(epoch)))
        parts = []
        bs = self.batch_size
        ids = self._ids
        of = None if ids is None else self.bucket_of[ids % len(self.bucket_of)]
        for b in range(len(self.groups)):
            idx = np.flatnonzero(self.bucket_of == b) if ids is None else ids[of == b]
            if not len(idx):
                continue
            if self.shuffle:
                idx = idx[torch.randperm(len(idx), generator=g).numpy()]
            short = len(idx) % bs
            if self.drop_last:
                idx = idx[:len(idx) - short]
            elif short:  # trained short: no sample twice in a batch
                idx = np.concatenate([idx, np.full(bs - short, -1, np.int64)])
            parts.append(idx.reshape(-1, bs))
        out = np.concatenate(parts) if parts else np.zeros((0, bs), np.int64)
        if self.shuffle and len(out):
            out = out[torch.randperm(len(out), generator=g).numpy()]
        return out.astype(np.int64, copy=False)

    def _global(self) -> tuple[np.ndarray, int, int]:
        """(the interleaved global batches left in this epoch, global batches consumed before
        them, where their layout starts in the epoch's batches)."""
        batches = self.epoch_batches()
        resume = self._resume
        if resume is None or resume[0] != self.epoch:
            return layout(batches, self.num_replicas, self.drop_last), 0, 0
        _, start, consumed, world = resume
        if world == self.num_replicas:
            full = layout(batches[start:], world, self.drop_last)
            return full[consumed - start:], consumed, start
        start = min(consumed, len(batches))
        return layout(batches[start:], self.num_replicas, self.drop_last), consumed, start

    def __len__(self) -> int:
        """This rank's batches in a whole epoch (a resumed pass yields the rest of it)."""
        t = len(self.epoch_batches())
        return t // self.num_replicas if self.drop_last else -(-t // self.num_replicas)

    def __iter__(self) -> Iterator[list[int]]:
        remaining, before, start = self._global()
        self._resume = None  # a resume serves one pass
        self._pass = (self.epoch, before, start)
        self._yielded = 0
        for row in remaining[self.rank::self.num_replicas]:
            self._yielded += 1
            yield row[row >= 0].tolist()

    def bucket_sizes(self) -> np.ndarray:
        """(N, 2) the (height, width) bucket of every sample."""
        return np.asarray(self.groups, np.int64)[self.bucket_of]

    def set_epoch(self, epoch: int) -> None:
        """The epoch (the shuffle seed is ``seed + epoch``), as torch's DistributedSampler."""
        epoch = checked_epoch(epoch, "BucketBatchSampler.set_epoch", MAX_EPOCH)
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        self.epoch = epoch

    # --- resume ----------------------------------------------------------------------------
    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """Plain state: epoch, seed, global batches consumed in this epoch, world size.

        Args:
            consumed: batches THIS rank consumed in the current pass (a DataLoader that
                reads ahead passes what it handed out); default: the batches yielded.

        Returns:
            A dict of ints, bools and lists (JSON-safe).
        """
        if self._resume is not None and self._resume[0] == self.epoch:
            _, start, before, world = self._resume  # loaded, not iterated yet: as loaded
            return self._state(before, world, start)
        if self._pass is not None and self._pass[0] == self.epoch:
            _, before, start = self._pass
            local = self._yielded if consumed is None else int(consumed)
            return self._state(before + local * self.num_replicas, self.num_replicas, start)
        return self._state(0, self.num_replicas, 0)

    def _state(self, consumed: int, world: int, start: int) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "fingerprint": self.fingerprint,
                "epoch": int(self.epoch), "seed": self.seed,
                "consumed": int(consumed), "world_size": int(world), "start": int(start),
                "batch_size": self.batch_size, "dataset_len": len(self.sizes),
                "buckets": [list(b) for b in self.buckets], "shuffle": self.shuffle,
                "drop_last": self.drop_last}

    @property
    def fingerprint(self) -> str:
        """The digest that ties a state to this dataset: its manifest (when it has one) and
        every sample's stored size (``loaders.states.fingerprint``)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.dataset, self.sizes, self.repeats)
        return self._fingerprint

    def left(self) -> int:
        """This rank's batches in the next pass (the rest of a resumed epoch)."""
        return len(self._global()[0]) // self.num_replicas

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch with exactly the batches not consumed (any world size).

        Raises:
            UserError: the state was saved for another dataset, batch size or bucket list,
                or a key is missing, of the wrong type or out of range (nothing is changed).
        """
        f = Fields(state, "BucketBatchSampler state",
                   "pass the state_dict() this sampler saved, as saved")
        saved_len = f.integer("dataset_len", 0, default=len(self.sizes))
        if saved_len != len(self.sizes):
            raise UserError(f"BucketBatchSampler state: saved with dataset_len={saved_len} but "
                            f"this dataset has {len(self.sizes)} samples — resume with the "
                            "dataset the state was saved with")
        version = f.version(_READS)
        if version >= 2:
            check_fingerprint(f, self.fingerprint)
        for key, mine in {"batch_size": self.batch_size,
                          "buckets": [list(b) for b in self.buckets], "shuffle": self.shuffle,
                          "drop_last": self.drop_last}.items():
            f.same(key, mine, "sampler")
        seed, epoch = f.seed_and_epoch()
        world = f.integer("world_size", 1)
        total = len(self.epoch_batches(epoch))  # how many: the seed only orders them
        start = f.integer("start", 0, total, default=0)
        per_rank = (total - start) // world if self.drop_last else -(-(total - start) // world)
        start, consumed = f.position(total, world, per_rank * world)
        if version == 1 and consumed:
            raise UserError(f"BucketBatchSampler state: version 1, saved mid-epoch (consumed="
                            f"{consumed}), records no fingerprint of the image sizes its batches "
                            f"were cut from — resume from the start of epoch {epoch} "
                            f"(set_epoch({epoch})) or of the next one")
        self.seed, self.epoch = seed, epoch
        self._resume = (epoch, start, consumed, world)
        self._yielded = 0


def bind_buckets(transform: Any, batch_sampler: Any, batch_size: int | None) -> None:
    """Give the sampler's buckets to every ``ResizeCrop(size=None)`` of ``transform``; refuse,
    before any batch is read, one built with other buckets, or one with nothing to go by.

    Raises:
        UserError: the lists differ, or bucket-less batches meet a ``ResizeCrop(size=None)``
            that was given no buckets.
    """
    stages = [t for t in stages_of(transform)
              if callable(getattr(t, "take_buckets", None)) and t.size is None]
    for t in stages:
        if isinstance(batch_sampler, BucketBatchSampler):
            t.take_buckets(batch_sampler.rule, "BucketBatchSampler")
        elif t.given is None and (batch_sampler is not None or (batch_size or 1) > 1):
            raise UserValueError(
                "DataLoader: ResizeCrop(size=None) resizes each batch to its aspect-ratio "
                "bucket, and these batches come from no BucketBatchSampler — pass "
                "batch_sampler=npu_data.BucketBatchSampler(dataset, batch_size, buckets=...) "
                "(the transform takes its buckets)")


def stages_of(transform: Any) -> list[Any]:
    """The stages of ``transform``, nested pipelines flattened."""
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, list | tuple):
        return [s for t in inner for s in stages_of(t)]
    return [transform]
