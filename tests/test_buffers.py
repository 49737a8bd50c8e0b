"""Batch buffers reused in the process (``buffers.reused_empty``): only once nothing of the
old batch is alive, never while a tensor, view or numpy array still reads it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from npu_data import buffers


@pytest.fixture(autouse=True)
def small_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(buffers, "_REUSE_FROM", 0)  # the rule, on test-sized buffers
    buffers.release_reused()
    yield
    buffers.release_reused()


def test_a_dropped_buffer_is_handed_out_again() -> None:
    a = buffers.reused_empty((2, 3, 8, 8))
    ptr = a.data_ptr()
    del a
    b = buffers.reused_empty((2, 3, 8, 8))
    assert b.data_ptr() == ptr and b.shape == (2, 3, 8, 8) and b.is_contiguous()
    assert buffers.reused_empty((2, 3, 8, 9)).data_ptr() != ptr  # another size: its own


@pytest.mark.parametrize("keep", ["tensor", "view", "numpy", "permuted"])
def test_a_buffer_anything_still_reads_is_not_reused(keep: str) -> None:
    a = buffers.reused_empty((2, 3, 8, 8))
    a.fill_(7)
    held: Any = a
    if keep == "view":
        held = a[1]
    elif keep == "numpy":
        held = a.numpy()
    elif keep == "permuted":
        held = a.permute(0, 2, 3, 1)
    ptr = a.data_ptr()
    del a
    b = buffers.reused_empty((2, 3, 8, 8))
    b.fill_(1)
    assert b.data_ptr() != ptr
    assert (torch.as_tensor(held) == 7).all()


def test_only_the_last_few_are_kept_and_release_drops_them() -> None:
    ptrs = []
    for _ in range(buffers._KEEP + 2):
        ptrs.append(buffers.reused_empty((4, 4)).data_ptr())  # dropped at once: reused
    assert len(set(ptrs)) == 1
    alive = [buffers.reused_empty((4, 4)) for _ in range(buffers._KEEP + 2)]
    assert len({t.data_ptr() for t in alive}) == len(alive)
    assert len(buffers._HELD) == buffers._KEEP
    buffers.release_reused()
    assert buffers._HELD == [] and all(t.numel() == 16 for t in alive)


def test_big_buffers_only() -> None:
    buffers._REUSE_FROM = 1 << 20  # monkeypatched back by the fixture
    a = buffers.reused_empty((4, 4))
    assert buffers._HELD == [] and a.shape == (4, 4)


def test_scratch_buffers_outlive_the_thread_that_used_them() -> None:
    """A read-ahead thread is new each epoch: its decode buffer is the previous one's."""
    import threading

    ptrs: list[int] = []

    def decode() -> None:
        buf = buffers.reused_scratch(1000)
        buf.fill_(3)
        ptrs.append(buf.data_ptr())

    for _ in range(3):
        t = threading.Thread(target=decode)
        t.start()
        t.join()
    assert len(set(ptrs)) == 1 and len(buffers._SCRATCH) == 1


def test_scratch_in_use_is_not_handed_out_and_outgrown_ones_are_replaced() -> None:
    a = buffers.reused_scratch(1000)
    region = a[100:200].view(10, 10)  # a decoded region still read by its caller
    region.fill_(9)
    b = buffers.reused_scratch(500)
    assert b.data_ptr() != a.data_ptr() and b.numel() >= 500
    b.fill_(1)
    assert bool((region == 9).all())
    ptr_a = a.data_ptr()
    del a, region, b
    c = buffers.reused_scratch(800)  # the smaller free one is too small: the 1000 one fits
    assert c.data_ptr() == ptr_a
    del c
    big = buffers.reused_scratch(5000)  # none fits: a bigger one replaces the largest free one
    assert big.numel() >= 5000 and len(buffers._SCRATCH) == 2
    assert sorted(s.nbytes() for s in buffers._SCRATCH)[0] < 1000
    buffers.release_reused()
    assert buffers._SCRATCH == [] and big.numel() >= 5000
