"""Elastic resume through the DataLoader (issue 36, bug 2): a state saved on one world size
and loaded on another serves every batch (or sample) of the epoch exactly once, for every
batch sampler we ship: BucketBatchSampler, NpuDistributedSampler with and without
shard_window. Ranks are simulated with num_replicas/rank."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.loaders import BucketBatchSampler, DataLoader, NpuDistributedSampler

BUCKETS = [(64, 64), (48, 80), (80, 48)]


class Sized(torch.utils.data.Dataset):
    """Samples that are their own index, with stored sizes (``sizes()``) in three aspect
    buckets of the given counts, interleaved, and a manifest of shards of ``shard`` samples."""

    def __init__(self, counts: tuple[int, ...], shard: int = 8) -> None:
        kinds = np.concatenate([np.full(c, k) for k, c in enumerate(counts)])
        kinds = kinds[np.random.default_rng(0).permutation(len(kinds))]
        self._sizes = np.asarray(BUCKETS, np.int64)[kinds]
        n = len(kinds)
        self.manifest = {"shards": [{"name": f"shard-{k:05d}", "samples": min(shard, n - a)}
                                    for k, a in enumerate(range(0, n, shard))]}

    def __len__(self) -> int:
        return len(self._sizes)

    def __getitem__(self, i: int) -> int:
        return int(i)

    def sizes(self) -> np.ndarray:
        return self._sizes


Make = Callable[[int, int], DataLoader]


def _buckets(ds: Sized, batch_size: int = 4, workers: int = 0) -> Make:
    def make(world: int, rank: int) -> DataLoader:
        sampler = BucketBatchSampler(ds, batch_size, BUCKETS, num_replicas=world, rank=rank,
                                     seed=7)
        return DataLoader(ds, batch_sampler=sampler, device="cpu", num_workers=workers)
    return make


def _samples(ds: Sized, window: int | None, batch_size: int = 4) -> Make:
    def make(world: int, rank: int) -> DataLoader:
        sampler = NpuDistributedSampler(ds, world, rank, seed=7, shard_window=window)
        return DataLoader(ds, batch_size=batch_size, sampler=sampler, device="cpu")
    return make


def _epoch(make: Make, old: int, new: int, head: int, epoch: int = 1
           ) -> tuple[list[tuple[int, ...]], list[list[tuple[int, ...]]], dict[str, Any]]:
    """Every old rank serves ``head`` batches of ``epoch`` and saves; every new rank loads
    rank 0's state and serves the rest. (all batches served, the new ranks' tails, state)."""
    served: list[tuple[int, ...]] = []
    states = []
    for r in range(old):
        loader = make(old, r)
        loader.set_epoch(epoch)
        it = iter(loader)
        served += [tuple(next(it).tolist()) for _ in range(head)]
        states.append(json.loads(json.dumps(loader.state_dict())))  # plain data
    assert all(s == states[0] for s in states)  # every rank saves the same state
    tails = []
    for r in range(new):
        loader = make(new, r)
        loader.load_state_dict(states[0])
        length = len(loader)
        tail = [tuple(b.tolist()) for b in loader]
        assert length == head + len(tail)  # the epoch: what was served, then the rest
        nxt = loader.state_dict()
        assert (nxt["epoch"], nxt["batches"]) == (epoch + 1, 0)
        tails.append(tail)
        served += tail
    assert len({len(t) for t in tails}) == 1  # every new rank the same number (DDP)
    return served, tails, states[0]


def _whole_epoch(make: Make, epoch: int = 1) -> list[tuple[int, ...]]:
    loader = make(1, 0)
    loader.set_epoch(epoch)
    return [tuple(b.tolist()) for b in loader]


# counts of the three buckets: whole batches of 4 in each, 15 or 16 batches in all
CASES = {"1->2": (1, 2, 5, (24, 20, 16)), "2->1": (2, 1, 3, (24, 20, 20)),
         "4->2": (4, 2, 2, (24, 20, 20))}


@pytest.mark.parametrize("case", list(CASES))
def test_buckets_serve_every_batch_once_across_world_sizes(case: str) -> None:
    old, new, head, counts = CASES[case]
    ds = Sized(counts)
    make = _buckets(ds)
    whole = _whole_epoch(make)
    served, _, state = _epoch(make, old, new, head)
    assert state["sampler"]["consumed"] == head * old  # global batches, not this rank's
    assert Counter(served) == Counter(whole)  # each batch once: none lost, none repeated
    assert len(set(whole)) == len(whole) == sum(counts) // 4


def test_buckets_elastic_resume_counts_what_was_yielded_not_read_ahead() -> None:
    """With a worker the sampler runs batches ahead of the loop: the state counts the
    batches handed out (2 -> 1)."""
    old, new, head, counts = CASES["2->1"]
    make = _buckets(Sized(counts), workers=1)
    served, _, state = _epoch(make, old, new, head)
    assert state["sampler"]["consumed"] == head * old
    assert Counter(served) == Counter(_whole_epoch(_buckets(Sized(counts))))


def test_buckets_elastic_resume_pads_only_the_new_layout() -> None:
    """15 batches on 4 ranks then 2: every batch served, repeats only the two layouts'
    padding (fewer than each world size)."""
    ds = Sized((24, 20, 16))
    make = _buckets(ds)
    whole = _whole_epoch(make)
    served, tails, _ = _epoch(make, 4, 2, 2)
    assert set(served) == set(whole)
    assert len(served) - len(whole) <= 1  # 8 served, 7 left padded to 8 on 2 ranks
    assert len(tails[0]) == 4


def test_buckets_resume_twice_across_three_world_sizes() -> None:
    """1 -> 2 -> 4 within one epoch: the state after an elastic resume resumes again."""
    ds = Sized((24, 20, 20))  # 16 batches
    make = _buckets(ds)
    whole = _whole_epoch(make)
    one = make(1, 0)
    one.set_epoch(1)
    it = iter(one)
    served = [tuple(next(it).tolist()) for _ in range(4)]
    state = one.state_dict()
    second = []
    for r in range(2):
        loader = make(2, r)
        loader.load_state_dict(state)
        it = iter(loader)
        served += [tuple(next(it).tolist()) for _ in range(2)]
        second.append(json.loads(json.dumps(loader.state_dict())))
    assert second[0] == second[1] and second[0]["sampler"]["consumed"] == 8
    for r in range(4):
        loader = make(4, r)
        loader.load_state_dict(second[0])
        served += [tuple(b.tolist()) for b in loader]
    assert Counter(served) == Counter(whole)


@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_distributed_sampler_serves_every_sample_once_across_world_sizes(
        case: str, window: int | None) -> None:
    """48 samples, batches of 4 (the new ranks' last batches short): each sample once."""
    old, new, _, _ = CASES[case]
    ds = Sized((16, 16, 16))
    served, _, state = _epoch(_samples(ds, window), old, new, 12 // (4 * old) or 1)
    samples = [i for batch in served for i in batch]
    assert sorted(samples) == list(range(48))
    assert state["sampler"]["consumed"] == (12 // (4 * old) or 1) * 4 * old


def test_a_window_sampler_reused_across_resumes_serves_as_a_fresh_one() -> None:
    """The sampler keeps its last replayed layout chain: loading other states (a longer
    chain, a shorter one, another epoch) on the same object serves what a fresh one does."""
    ds = Sized((16, 16, 16))

    def sampler(world: int, rank: int) -> NpuDistributedSampler:
        return NpuDistributedSampler(ds, world, rank, seed=7, shard_window=2)

    def after(s: NpuDistributedSampler, k: int) -> dict[str, Any]:
        it = iter(s)
        for _ in range(k):
            next(it)
        return s.state_dict()

    first = after(sampler(2, 0), 3)
    two = sampler(3, 0)
    two.load_state_dict(first)
    second = after(two, 2)
    three = sampler(2, 1)
    three.load_state_dict(second)
    third = after(three, 1)
    assert [len(s["layouts"]) for s in (first, second, third)] == [1, 2, 3]
    other_epoch = sampler(3, 1)
    other_epoch.set_epoch(4)
    fourth = after(other_epoch, 2)
    reused = sampler(3, 1)
    for state in (first, third, second, third, fourth, first):
        reused.load_state_dict(state)
        fresh = sampler(3, 1)
        fresh.load_state_dict(state)
        assert list(reused) == list(fresh)
