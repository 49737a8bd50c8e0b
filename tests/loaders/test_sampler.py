"""NpuDistributedSampler: torch's order, exact resume, elastic remainder, locality blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from npu_data.errors import UserError
from npu_data.loaders import NpuDistributedSampler


@pytest.mark.parametrize("n,world,shuffle,drop_last", list(itertools.product(
    [1, 7, 16, 29], [1, 2, 3, 5], [True, False], [True, False])))
def test_same_order_as_torch(n: int, world: int, shuffle: bool, drop_last: bool) -> None:
    for rank in range(world):
        for epoch in (0, 4):
            ref = DistributedSampler(range(n), world, rank, shuffle, 11, drop_last)
            ours = NpuDistributedSampler(range(n), world, rank, shuffle, 11, drop_last)
            ref.set_epoch(epoch)
            ours.set_epoch(epoch)
            assert list(ours) == list(ref)
            assert len(ours) == len(ref) and ours.total_size == ref.total_size


def test_world_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    s = NpuDistributedSampler(range(10))
    assert (s.num_replicas, s.rank) == (3, 2)
    assert list(s) == list(DistributedSampler(range(10), 3, 2))
    with pytest.raises(ValueError, match="Invalid rank"):
        NpuDistributedSampler(range(10), num_replicas=2, rank=2)


@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_same_world_serves_exactly_the_rest(drop_last: bool) -> None:
    n, world = 31, 3
    full = [list(NpuDistributedSampler(range(n), world, r, seed=5, drop_last=drop_last))
            for r in range(world)]
    for consumed in (0, 1, 4, len(full[0])):
        s = NpuDistributedSampler(range(n), world, 1, seed=5, drop_last=drop_last)
        s.set_epoch(0)
        it = iter(s)
        for _ in range(consumed):
            next(it)
        state = s.state_dict()
        assert state["consumed"] == consumed * world
        for r in range(world):
            t = NpuDistributedSampler(range(n), world, r, seed=0, drop_last=drop_last)
            t.load_state_dict(state)
            assert t.seed == 5
            assert len(t) == len(full[r]) - consumed
            assert list(t) == full[r][consumed:]
            assert len(list(t)) == len(full[r])  # the next pass is a whole epoch again


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (4, 1), (1, 4)])
def test_elastic_remainder_is_exactly_the_unseen(old: int, new: int) -> None:
    n, epoch, per_rank_done = 41, 2, 5
    seen: list[int] = []
    for r in range(old):
        s = NpuDistributedSampler(range(n), old, r, seed=3)
        s.set_epoch(epoch)
        seen += list(s)[:per_rank_done]
    state = NpuDistributedSampler(range(n), old, 0, seed=3)
    state.set_epoch(epoch)
    st = state.state_dict(consumed=per_rank_done)
    parts = []
    for r in range(new):
        t = NpuDistributedSampler(range(n), new, r, seed=3)
        t.load_state_dict(st)
        assert t.epoch == epoch
        parts.append(list(t))
    assert len({len(p) for p in parts}) == 1  # every rank the same length
    unseen = set(range(n)) - set(seen)
    got = [i for p in parts for i in p]
    assert set(got) == unseen
    # padding repeats at most new-1 unseen samples, nothing seen comes back
    assert len(got) - len(unseen) < new
    assert not set(got) & set(seen)


def test_elastic_chain_then_same_world_resume() -> None:
    n = 50
    s = NpuDistributedSampler(range(n), 2, 0, seed=9)
    st = s.state_dict(consumed=6)  # 12 consumed globally
    b = [NpuDistributedSampler(range(n), 3, r, seed=9) for r in range(3)]
    for x in b:
        x.load_state_dict(st)
    runs = [list(x) for x in b]
    st2 = b[0].state_dict(consumed=4)  # 12 more globally
    assert st2["consumed"] == 24 and st2["start"] == 12
    for r in range(3):
        c = NpuDistributedSampler(range(n), 3, r, seed=9)
        c.load_state_dict(st2)
        assert list(c) == runs[r][4:]


def test_state_checks_the_dataset() -> None:
    st = NpuDistributedSampler(range(10), 1, 0).state_dict()
    with pytest.raises(UserError, match="10 samples"):
        NpuDistributedSampler(range(12), 1, 0).load_state_dict(st)
    with pytest.raises(UserError, match="shuffle"):
        NpuDistributedSampler(range(10), 1, 0, shuffle=False).load_state_dict(st)


def test_locality_blocks_keep_neighbours_together() -> None:
    n, k = 1000, 50
    s = NpuDistributedSampler(range(n), 1, 0, seed=1, locality_block=k)
    order = np.array(list(s))
    assert sorted(order.tolist()) == list(range(n))
    blocks = order // k
    assert (np.diff(blocks) != 0).sum() == n // k - 1  # each block visited in one run
    assert not np.array_equal(order, np.arange(n))
    s.set_epoch(1)
    assert list(s) != order.tolist()
    with pytest.raises(UserError, match="locality_block"):
        NpuDistributedSampler(range(n), 1, 0, locality_block=0)


class _Sharded:
    """A stand-in for ShardDataset: its manifest's shard sample counts (and a prefetch log)."""

    def __init__(self, counts: list[int]) -> None:
        self.manifest = {"shards": [{"samples": c} for c in counts]}
        self.starts = np.r_[0, np.cumsum(counts)]
        self.asked: list[list[int]] = []

    def __len__(self) -> int:
        return int(self.starts[-1])

    def shard_of(self, idx: list[int]) -> np.ndarray:
        return np.searchsorted(self.starts, np.asarray(idx), side="right") - 1

    def prefetch(self, shards: list[int]) -> None:
        self.asked.append(shards)


COUNTS = [10] * 23 + [7]  # 237 samples, 24 shards


@pytest.mark.parametrize("world,drop_last", list(itertools.product([1, 2, 3, 5, 8],
                                                                   [False, True])))
def test_shard_window_covers_each_epoch_once(world: int, drop_last: bool) -> None:
    ds = _Sharded(COUNTS)
    n = len(ds)
    for epoch in (0, 1):
        parts = []
        for r in range(world):
            s = NpuDistributedSampler(ds, world, r, seed=2, drop_last=drop_last, shard_window=2)
            s.set_epoch(epoch)
            parts.append(list(s))
            assert len(parts[-1]) == len(s)
        assert len({len(p) for p in parts}) == 1
        got = [i for p in parts for i in p]
        if drop_last:  # fewer than world samples dropped, none repeated
            assert len(got) == len(set(got)) and n - len(got) < world
        else:  # every sample, at most world - 1 padded repeats
            assert set(got) == set(range(n)) and len(got) - n < world
    e0 = list(NpuDistributedSampler(ds, 1, 0, seed=2, shard_window=2))
    s1 = NpuDistributedSampler(ds, 1, 0, seed=2, shard_window=2)
    s1.set_epoch(1)
    assert e0 != list(s1) and sorted(e0) == list(range(n))


def test_shard_window_touches_few_shards_per_rank() -> None:
    ds, world = _Sharded(COUNTS), 4
    for r in range(world):
        local = list(NpuDistributedSampler(ds, world, r, seed=5, shard_window=2))
        plain = list(NpuDistributedSampler(ds, world, r, seed=5))
        few, many = len(set(ds.shard_of(local))), len(set(ds.shard_of(plain)))
        assert few <= len(COUNTS) // world + 2 and many >= 3 * few
        # inside the rank's stream at most window (+1 at a window edge) shards meet
        runs = ds.shard_of(local)
        for a in range(0, len(runs) - 20, 10):
            assert len(set(runs[a:a + 20].tolist())) <= 4
    # the order inside a window is shuffled, not sorted
    one = list(NpuDistributedSampler(ds, 1, 0, seed=5, shard_window=3))
    assert one != sorted(one)


@pytest.mark.parametrize("world,stop", [(1, 17), (3, 9), (4, 0)])
def test_shard_window_resume_equals_uninterrupted(world: int, stop: int) -> None:
    ds = _Sharded(COUNTS)
    full = [list(NpuDistributedSampler(ds, world, r, seed=8, shard_window=2))
            for r in range(world)]
    s = NpuDistributedSampler(ds, world, 0, seed=8, shard_window=2)
    it = iter(s)
    for _ in range(stop):
        next(it)
    state = s.state_dict()
    assert state["layouts"] == [[0, world]] and state["consumed"] == stop * world
    for r in range(world):
        t = NpuDistributedSampler(ds, world, r, seed=8, shard_window=2)
        t.load_state_dict(state)
        assert list(t) == full[r][stop:]
    with pytest.raises(UserError, match="shard_window"):
        NpuDistributedSampler(ds, world, 0, seed=8).load_state_dict(state)


def test_shard_window_elastic_chain_serves_exactly_the_unseen() -> None:
    ds = _Sharded(COUNTS)
    n = len(ds)
    seen: list[int] = []
    for r in range(2):
        seen += list(NpuDistributedSampler(ds, 2, r, seed=1, shard_window=2))[:30]
    st = NpuDistributedSampler(ds, 2, 0, seed=1, shard_window=2).state_dict(consumed=30)
    three = [NpuDistributedSampler(ds, 3, r, seed=1, shard_window=2) for r in range(3)]
    for t in three:
        t.load_state_dict(st)
    runs = [list(t) for t in three]
    assert not set(i for p in runs for i in p) & set(seen)
    assert set(i for p in runs for i in p) == set(range(n)) - set(seen)
    for r in range(3):  # each new rank still reads few shards
        assert len(set(ds.shard_of(runs[r]))) <= len(COUNTS) // 3 + 3
    for p in runs:  # consume 12 more each, then 3 -> 5 ranks
        seen += p[:12]
    st2 = three[0].state_dict(consumed=12)
    assert st2["layouts"] == [[0, 2], [60, 3]] and st2["consumed"] == 96
    same = NpuDistributedSampler(ds, 3, 1, seed=1, shard_window=2)
    same.load_state_dict(st2)
    assert list(same) == runs[1][12:]  # same world again: exactly the rest
    five = []
    for r in range(5):
        t = NpuDistributedSampler(ds, 5, r, seed=1, shard_window=2)
        t.load_state_dict(st2)
        five += list(t)
    assert set(five) == set(range(n)) - set(seen) and len(five) - len(set(five)) < 5


def test_sampler_tells_the_dataset_which_shards_come_next() -> None:
    ds = _Sharded(COUNTS)
    s = NpuDistributedSampler(ds, 2, 1, seed=4, shard_window=2)
    order = list(s)
    shards = ds.shard_of(order)
    first_touch = [int(k) for j, k in enumerate(shards) if j == 0 or shards[j - 1] != k]
    assert [a[0] for a in ds.asked] == first_touch  # asked on entering each shard run
    assert ds.asked[0] == first_touch[:8]  # with the upcoming ones in order
    with pytest.raises(UserError, match="lists no shards"):
        NpuDistributedSampler(range(10), 1, 0, shard_window=2)
    with pytest.raises(UserError, match="choose one"):
        NpuDistributedSampler(ds, 1, 0, shard_window=2, locality_block=4)


def test_state_between_epochs_is_the_start_of_the_next() -> None:
    s = NpuDistributedSampler(range(10), 2, 0, seed=1)
    list(s)
    s.set_epoch(1)
    state = s.state_dict()  # what a loader snapshots before the next pass
    assert (state["epoch"], state["consumed"]) == (1, 0)
    t = NpuDistributedSampler(range(10), 2, 0)
    t.load_state_dict(state)
    s2 = NpuDistributedSampler(range(10), 2, 0, seed=1)
    s2.set_epoch(1)
    assert list(t) == list(s2)
