"""Shard-local epoch layouts for ``NpuDistributedSampler(shard_window=K)``.

A remote dataset costs a download per shard a node touches: with a uniform shuffle every
rank touches every shard each epoch. ``window_layout`` instead shuffles the shards, cuts the
resulting stream into one contiguous part per rank and shuffles samples only inside windows
of ``K`` consecutive shards of a part. The randomness lost: a batch mixes samples from at most
``K`` (+1 at a window edge) shards, and which shards meet in a window changes every epoch.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserError, UserTypeError

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
    nshards = len(starts) - 1
    shard = np.searchsorted(starts, left, side="right") - 1
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
