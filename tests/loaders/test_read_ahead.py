"""Reading on a background thread (``loaders.prefetch.read_ahead``,
``DataLoader(read_thread=...)``): the same batches in the same order, errors where they
happened, no thread left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from npu_data.errors import UserError
from npu_data.loaders import DataLoader
from npu_data.loaders.prefetch import read_ahead
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop
from tests.support.compare import same_loader_batch


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name == "npu-data-read-ahead"}


def test_items_come_in_order_and_at_most_depth_ahead() -> None:
    produced: list[int] = []

    def source() -> Iterator[int]:
        for i in range(50):
            produced.append(i)
            yield i

    it = read_ahead(source(), depth=3)
    assert next(it) == 0
    time.sleep(0.3)  # let the producer run as far as it may
    assert len(produced) <= 1 + 3 + 1  # consumed, queued, and the one waiting to be queued
    assert [0, *it] == list(range(50))
    assert not _threads()


def test_an_error_reaches_the_consumer_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise KeyError("sample 7 is missing")

    got = []
    with pytest.raises(KeyError, match="sample 7"):
        for x in read_ahead(source(), depth=4):
            got.append(x)
    assert got == [1, 2]
    assert not _threads()


def test_leaving_early_stops_the_producer() -> None:
    def endless() -> Iterator[int]:
        i = 0
        while True:
            yield i
            i += 1

    it = read_ahead(endless(), depth=2)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    it.close()  # what a `break` out of a for loop does (at garbage collection at the latest)
    assert not _threads()
    with pytest.raises(ValueError, match="depth=0"):
        next(read_ahead(iter([1]), depth=0))


def _pipeline() -> Any:
    return Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def _loader(ds: Any, read_thread: bool | None, **kw: Any) -> DataLoader:
    args: dict[str, Any] = {"batch_size": 6, "shuffle": True, "seed": 3, "device": "cpu",
                            "read_thread": read_thread}
    args.update(kw)
    return DataLoader(ds, **args)


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_a_read_thread_gives_the_same_batches(stores: dict[str, ShardDataset],  # noqa: F811
                                              store: str) -> None:
    ds = stores[store]
    plain = _loader(ds, False, transform=_pipeline())
    threaded = _loader(ds, True, transform=_pipeline())
    assert threaded._reads_ahead() and not plain._reads_ahead()
    for _ in range(2):  # two epochs: new order and new boxes in the second
        a, b = list(plain), list(threaded)
        assert len(a) == len(b) == 4
        for x, y in zip(a, b, strict=True):
            same_loader_batch(x, y)
    assert not _threads()


def test_the_default_reads_ahead_only_in_process_and_only_for_our_datasets(
        stores: dict[str, ShardDataset]) -> None:  # noqa: F811
    ds = stores["raw"]
    assert _loader(ds, None)._reads_ahead()
    assert not _loader(ds, None, num_workers=1)._reads_ahead()  # workers already read ahead
    assert not _loader(ds, True, num_workers=1)._reads_ahead()
    tensors = torch.utils.data.TensorDataset(torch.arange(10))  # may not be thread-safe
    assert not _loader(tensors, None)._reads_ahead()
    assert _loader(tensors, True)._reads_ahead()
    with pytest.raises(UserError, match="read_thread='yes'"):
        _loader(ds, "yes")  # type: ignore[arg-type]


def test_a_torch_dataset_on_a_read_thread_batches_as_torch_does() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(20), torch.arange(20) * 2)
    torch_batches = list(torch.utils.data.DataLoader(data, batch_size=3))
    ours = list(_loader(data, True, batch_size=3, shuffle=False))
    assert len(ours) == len(torch_batches) == 7
    for (a, b), (x, y) in zip(torch_batches, ours, strict=True):
        assert torch.equal(a, x) and torch.equal(b, y)


class _Failing(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 7:
            raise ValueError("sample 7 of the failing dataset is unreadable")
        return torch.tensor(i)


def test_a_dataset_error_is_raised_in_the_training_loop() -> None:
    seen = []
    with pytest.raises(ValueError, match="sample 7"):
        for b in _loader(_Failing(), True, batch_size=2, shuffle=False):
            seen.append(b.tolist())
    assert seen == [[0, 1], [2, 3], [4, 5]]
    assert not _threads()


def test_resume_counts_the_batches_consumed_not_the_ones_read_ahead(
        stores: dict[str, ShardDataset]) -> None:  # noqa: F811
    ds = stores["raw"]
    full = [b["image"] for b in _loader(ds, True, transform=_pipeline(), batch_size=4)]
    loader = _loader(ds, True, transform=_pipeline(), batch_size=4)
    it = iter(loader)
    first = [next(it)["image"] for _ in range(2)]  # the thread has read further by now
    state = loader.state_dict()
    it.close()
    assert not _threads()
    resumed = _loader(ds, True, transform=_pipeline(), batch_size=4)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(first) + len(rest) == len(full) == 6
    for a, b in zip(full, first + rest, strict=True):
        assert torch.equal(a, b)


_PIN_THREAD_FIRST = """
import threading, torch
from npu_data.loaders import DataLoader
torch.set_num_threads(3)  # the caller's choice
# torch's pin-memory thread does this; a thread asking torch for its count later gets 1
t = threading.Thread(target=torch.set_num_threads, args=(1,)); t.start(); t.join()

class Probe(torch.utils.data.Dataset):
    def __len__(self): return 4
    def __getitem__(self, i): return torch.tensor(torch.get_num_threads())

loader = DataLoader(Probe(), batch_size=2, read_thread=True)
print(sorted(set(b.tolist()) for b in loader))
"""


@pytest.mark.slow
def test_the_read_thread_keeps_the_callers_torch_threads() -> None:
    """The read thread's kernels run on the caller's thread count, not the 1 that torch's
    pin-memory thread leaves as the process default (seen on a 16-core GPU machine)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PIN_THREAD_FIRST], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str([{3}] * 2)
