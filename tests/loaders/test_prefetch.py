"""The DataLoader's copies to the device (loaders.prefetch): order, depth, failures, resume
discards and the byte count, on the CPU (the same path, without streams)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from loaders_fakes import ArrayDataset

from npu_data.loaders import DataLoader
from npu_data.loaders.prefetch import DevicePrefetcher, tensor_bytes, to_device

CPU = torch.device("cpu")
Pair = namedtuple("Pair", ["image", "label"])


class Source:
    """Host batches 0..n-1 (a (2, 3) int64 tensor each), recording how many were read;
    batch ``fail`` raises instead."""

    def __init__(self, n: int, fail: int | None = None) -> None:
        self.n, self.fail, self.read = n, fail, 0

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            self.read += 1
            if i == self.fail:
                raise OSError(f"batch {i} is damaged")
            yield {"x": torch.full((2, 3), i)}


def _run(source: Source, depth: int, discard: int = 0,
         prefetcher: DevicePrefetcher | None = None) -> list[tuple[int, Any, bool]]:
    fetch = prefetcher or DevicePrefetcher()
    out = []
    for batch, aug, last in fetch.batches(iter(source), CPU, depth,
                                          lambda host: (host, {"n": int(host["x"][0, 0])}), discard):
        out.append((int(batch["x"][0, 0]), aug, last))
    return out


@pytest.mark.parametrize("depth", [0, 1, 2, 5])
def test_batches_keep_their_order_and_only_the_last_is_flagged(depth: int) -> None:
    got = _run(Source(4), depth)
    assert [n for n, _, _ in got] == [0, 1, 2, 3]
    assert [last for _, _, last in got] == [False, False, False, True]
    assert [aug for _, aug, _ in got] == [{"n": i} for i in range(4)]


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_reads_at_most_depth_batches_ahead(depth: int) -> None:
    source = Source(10)
    fetch = DevicePrefetcher().batches(iter(source), CPU, depth, lambda host: (host, None))
    next(fetch)
    assert source.read == 1 + max(1, depth)  # the one due, then depth more (at least one)


@pytest.mark.parametrize("depth", [0, 2])
def test_a_failed_batch_raises_when_due_and_nothing_is_read_past_it(depth: int) -> None:
    source = Source(10, fail=2)
    fetch = DevicePrefetcher().batches(iter(source), CPU, depth, lambda host: (host, None))
    assert [int(next(fetch)[0]["x"][0, 0]) for _ in range(2)] == [0, 1]
    with pytest.raises(OSError, match="batch 2 is damaged"):
        next(fetch)
    assert source.read == 3


def test_a_resumed_stream_drops_the_batches_it_served_and_counts_only_the_rest() -> None:
    fetch = DevicePrefetcher()
    got = _run(Source(5), depth=2, discard=3, prefetcher=fetch)
    assert [n for n, _, _ in got] == [3, 4]
    assert fetch.host_bytes == 2 * 2 * 3 * 8  # two int64 (2, 3) batches handed on
    _run(Source(1), depth=0, prefetcher=fetch)
    assert fetch.host_bytes == 3 * 2 * 3 * 8  # over every pass


def test_to_device_keeps_containers_and_tensor_bytes_walks_them() -> None:
    batch = {"pair": Pair(torch.zeros(2, 2, dtype=torch.uint8), 3), "names": ["a", "b"],
             "nested": [(torch.ones(4),)]}
    moved = to_device(batch, CPU, non_blocking=False)
    assert type(moved["pair"]) is Pair and moved["pair"].label == 3
    assert moved["names"] == ["a", "b"] and type(moved["nested"][0]) is tuple
    assert tensor_bytes(batch) == 4 + 4 * 4


def test_the_loader_counts_the_host_bytes_it_hands_on() -> None:
    loader = DataLoader(ArrayDataset(6), batch_size=3, device="cpu", device_prefetch=1)
    assert loader.host_bytes == 0
    per_pass = sum(tensor_bytes(b) for b in loader)
    assert per_pass > 0 and loader.host_bytes == per_pass
    list(loader)
    assert loader.host_bytes == 2 * per_pass
