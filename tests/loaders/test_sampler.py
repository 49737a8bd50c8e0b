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
