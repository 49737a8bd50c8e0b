"""torch's epoch semantics for every iter(), and resume for any sampler (loaders.epochs)."""

from __future__ import annotations

import gc
import itertools
import warnings
import weakref
from typing import Any

import pytest
import torch
from loaders_fakes import ArrayDataset, noisy_flip
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    WeightedRandomSampler,
)

from npu_data.loaders import DataLoader, NpuDistributedSampler
from npu_data.loaders.epochs import EpochState, PassIndices
from npu_data.loaders.sampler import SequentialOrder, ShuffledOrder
from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

N = 22


def _keyed() -> Compose:
    return Compose([RandomResizedCrop(8), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def _copy(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _head(loader: DataLoader, k: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first ``k`` batches of a pass and the state saved right after them."""
    out = []
    for batch in loader:
        out.append(_copy(batch))
        if len(out) == k:
            return out, loader.state_dict()
    raise AssertionError("the pass ended early")


def _assert_same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x["index"], y["index"])
        assert torch.equal(x["image"], y["image"])


# --- every iter() is a new epoch ---------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda ds: DataLoader(ds, batch_size=4, shuffle=True, device="cpu", transform=_keyed()),
    lambda ds: DataLoader(ds, batch_size=4, sampler=NpuDistributedSampler(ds, 1, 0),
                          device="cpu", transform=_keyed(), num_workers=1,
                          persistent_workers=True),
    lambda ds: DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, 2, 1), device="cpu",
                          transform=noisy_flip),
], ids=["shuffle", "npu-sampler-workers", "torch-distributed"])
def test_a_step_limited_loop_gets_new_batches_every_epoch(make: Any) -> None:
    loader = make(ArrayDataset(N))
    firsts = []
    for _epoch in range(3):
        for step, batch in enumerate(loader):  # a max_steps loop: two steps per epoch
            if step == 0:
                firsts.append(_copy(batch))
            if step == 1:
                break
    pairs = itertools.combinations(firsts, 2)
    assert all(not torch.equal(a["index"], b["index"]) for a, b in pairs)  # a new order
    also = [_copy(b) for b in itertools.islice(loader, 1)]  # islice: the next epoch again
    assert not torch.equal(also[0]["index"], firsts[-1]["index"])


def test_a_step_limited_loop_gets_new_augmentation_of_the_same_samples() -> None:
    loader = DataLoader(ArrayDataset(N), batch_size=4, shuffle=False, device="cpu",
                        transform=_keyed())
    first = [_copy(next(iter(loader))) for _ in range(3)]
    assert all(torch.equal(b["index"], first[0]["index"]) for b in first)  # not shuffled
    assert not torch.equal(first[0]["image"], first[1]["image"])
    assert not torch.equal(first[1]["image"], first[2]["image"])


def test_set_epoch_wins_on_the_loader_and_on_its_sampler() -> None:
    ds = ArrayDataset(N)
    loader = DataLoader(ds, batch_size=4, shuffle=True, device="cpu", transform=_keyed())
    loader.set_epoch(5)
    a = [_copy(b) for b in loader]
    loader.set_epoch(5)  # chosen again: the same order (a repeat gets new augmentation)
    b = [_copy(b) for b in loader]
    assert [x["index"].tolist() for x in a] == [x["index"].tolist() for x in b]
    assert loader.epoch == 6
    sampler = DistributedSampler(ds, 2, 0, seed=3)
    theirs = DataLoader(ds, batch_size=4, sampler=sampler, device="cpu")
    for epoch in (4, 2):  # torch's loop: sampler.set_epoch(epoch) before each pass
        sampler.set_epoch(epoch)
        ref = DistributedSampler(ds, 2, 0, seed=3)
        ref.set_epoch(epoch)
        assert torch.cat([x["index"] for x in theirs]).tolist() == list(ref)


def test_len_is_the_whole_epoch_and_a_resumed_pass_yields_the_rest() -> None:
    ds = ArrayDataset(N)
    make = lambda: DataLoader(ds, batch_size=4, shuffle=True, device="cpu", seed=1,  # noqa: E731
                              transform=_keyed())
    full = [_copy(b) for b in make()]
    head, state = _head(make(), 2)
    resumed = make()
    resumed.load_state_dict(state)
    assert len(resumed) == len(full) == 6
    lengths = []
    tail = []
    for batch in resumed:
        lengths.append(len(resumed))
        tail.append(_copy(batch))
    assert lengths == [6] * 4 and len(resumed) == 6
    _assert_same(head + tail, full)
    assert len(list(resumed)) == 6 and resumed.epoch == 2  # then whole epochs


def test_a_state_saved_after_the_last_batch_starts_the_next_epoch() -> None:
    loader = DataLoader(ArrayDataset(N), batch_size=4, shuffle=True, device="cpu")
    it = iter(loader)
    for _ in range(len(loader)):  # Lightning stops at len(), before StopIteration
        next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)


# --- resume: ours natively, any other sampler by snapshot + fast-forward ---------------------
class Buckets:
    """A batch sampler with its own state, the protocol of ``BucketBatchSampler``: batches of
    one parity, drawn from (seed, epoch)."""

    def __init__(self, n: int, batch_size: int, seed: int = 0) -> None:
        self.n, self.batch_size, self.seed, self.epoch = n, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        out = []
        for parity in (0, 1):
            ids = [i for i in perm if i % 2 == parity]
            out += [ids[a:a + self.batch_size] for a in range(0, len(ids), self.batch_size)]
        order = torch.randperm(len(out), generator=g).tolist()
        return [out[i] for i in order]

    def __iter__(self) -> Any:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.seed = state["epoch"], state["seed"]


def _wrapper(ds: ArrayDataset, **kw: Any) -> Any:
    from lightning_fabric.utilities.distributed import DistributedSamplerWrapper

    weights = torch.arange(1, len(ds) + 1, dtype=torch.float64)
    inner = WeightedRandomSampler(weights, len(ds), generator=torch.Generator().manual_seed(2))
    return DistributedSamplerWrapper(inner, num_replicas=2, rank=1, **kw)


SAMPLERS = {
    "npu": lambda ds: {"sampler": NpuDistributedSampler(ds, 2, 1, seed=4)},
    "torch-distributed": lambda ds: {"sampler": DistributedSampler(ds, 2, 1, seed=4)},
    "lightning-wrapper": lambda ds: {"sampler": _wrapper(ds)},
    "random-generator": lambda ds: {
        "sampler": RandomSampler(ds, generator=torch.Generator().manual_seed(9))},
    "sequential": lambda ds: {"sampler": SequentialSampler(ds)},
    "list": lambda ds: {"sampler": list(range(len(ds)))[::-1]},
    "stateful-batch-sampler": lambda ds: {"batch_sampler": Buckets(len(ds), 3, seed=5)},
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_any_sampler_resumes_mid_epoch_exactly(name: str, workers: int) -> None:
    ds = ArrayDataset(N)

    def make() -> DataLoader:
        kw = SAMPLERS[name](ds)
        batch = {} if "batch_sampler" in kw else {"batch_size": 3}
        return DataLoader(ds, device="cpu", transform=_keyed(), seed=6, num_workers=workers,
                          **batch, **kw)

    ref = make()
    ref.set_epoch(1)
    [_copy(b) for b in ref]  # epoch 1 ...
    full = [_copy(b) for b in ref]  # ... then epoch 2, as a training loop reaches it
    first = make()
    first.set_epoch(1)
    list(first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: nothing to warn about
        head, state = _head(first, 2)
        assert state["epoch"] == 2 and state["batches"] == 2
        resumed = make()
        resumed.load_state_dict(state)
        assert len(resumed) == len(full)
        tail = [_copy(b) for b in resumed]
    _assert_same(head + tail, full)
    assert resumed.epoch == 3


def test_a_stateful_batch_sampler_gets_a_new_epoch_each_pass() -> None:
    loader = DataLoader(ArrayDataset(N), batch_sampler=Buckets(N, 3), device="cpu")
    passes = [[b["index"].tolist() for b in loader] for _ in range(2)]
    assert passes[0] != passes[1] and loader.batch_sampler.epoch == 1
    assert all(len({i % 2 for i in b}) == 1 for b in passes[0])  # its batches, as it made them


def test_an_inexact_resume_warns_once_and_keeps_the_epoch_length() -> None:
    ds = ArrayDataset(N)

    def make() -> DataLoader:
        return DataLoader(ds, batch_size=4, sampler=RandomSampler(ds), device="cpu")

    first = make()
    with pytest.warns(UserWarning, match="RandomSampler draws its order from torch's global"):
        head, state = _head(first, 2)
    resumed = make()
    resumed.load_state_dict(state)
    tail = [b["index"] for b in resumed]
    assert len(head) + len(tail) == len(resumed) == 6  # the rest of the epoch, by count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _head(make(), 1)  # said once


class _Broken(SequentialSampler):
    def state_dict(self) -> dict[str, Any]:
        raise RuntimeError("no state today")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise RuntimeError("no state today")


def test_a_checkpoint_never_dies_of_a_sampler() -> None:
    ds = ArrayDataset(N)
    loader = DataLoader(ds, batch_size=4, sampler=_Broken(ds), device="cpu")
    with pytest.warns(UserWarning, match=r"_Broken.state_dict\(\) failed"):
        _, state = _head(loader, 2)
    assert state["batches"] == 2


class _Stream(IterableDataset):
    """A deterministic stream with ``set_epoch`` (like WebDatasetStream)."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(self.epoch)
        return iter(torch.randperm(N, generator=g).tolist())


def test_a_stream_resumes_by_reading_past_what_it_served() -> None:
    def make() -> DataLoader:
        return DataLoader(_Stream(), batch_size=4, device="cpu")

    ref = make()
    list(ref)
    full = [b.tolist() for b in ref]  # epoch 1
    first = make()
    list(first)
    out = []
    for b in first:
        out.append(b.tolist())
        if len(out) == 2:
            state = first.state_dict()
            break
    resumed = make()
    resumed.load_state_dict(state)
    assert out + [b.tolist() for b in resumed] == full


def test_the_loaders_own_order_looks_like_torchs_to_frameworks() -> None:
    ds = ArrayDataset(N)
    assert isinstance(DataLoader(ds, shuffle=True, device="cpu").sampler, (RandomSampler,
                                                                           ShuffledOrder))
    assert isinstance(DataLoader(ds, device="cpu").sampler, (SequentialSampler, SequentialOrder))
    assert not isinstance(DataLoader(ds, shuffle=True, device="cpu").sampler, DistributedSampler)
    assert isinstance(NpuDistributedSampler(ds, 2, 0), DistributedSampler)


def test_epoch_state_alone_decides_epochs_repeats_and_lengths() -> None:
    """The loader only delegates: the same rules hold on an EpochState over any order."""
    order = NpuDistributedSampler(list(range(N)), num_replicas=1, rank=0, seed=1)
    indices = PassIndices(BatchSampler(order, 5, drop_last=False))
    state = EpochState(order, indices, stream=False)
    torch_len = indices.__len__
    assert (state.epoch, state.length(torch_len)) == (0, 5)
    assert [(p.epoch, p.repeat) for p in (state.begin(torch_len) for _ in range(2))] == [
        (0, 0), (1, 0)]
    state.set_epoch(1)  # the same epoch again: a repeat, new augmentation
    p = state.begin(torch_len)
    assert (p.epoch, p.repeat, order.epoch, p.length) == (1, 1, 1, 5)
    order.set_epoch(6)  # chosen on the order itself: it wins
    assert state.epoch == 6
    saved = state.state_dict(seed=1, batch_size=5)
    assert (saved["epoch"], saved["batches"], saved["repeat"]) == (6, 0, 0)
    again = EpochState(order, indices, stream=False)
    assert again.load_state_dict(saved, 5, torch_len, seed=0) == 1 and again.epoch == 6
    assert again.load_state_dict({k: v for k, v in saved.items() if k != "seed"}, 5,
                                 torch_len, seed=3) == 3


def test_the_loader_exposes_its_order_and_device_choice_read_only() -> None:
    ds = ArrayDataset(N)
    auto = DataLoader(ds, shuffle=True)
    assert auto.order is auto.sampler and auto.auto_device
    sampler = NpuDistributedSampler(ds, 2, 1)
    fixed = DataLoader(ds, batch_size=4, sampler=sampler, device="cpu")
    assert fixed.order is sampler and not fixed.auto_device
    with pytest.raises(AttributeError):
        fixed.order = sampler  # type: ignore[misc]


def test_a_dropped_loader_is_freed_at_once_not_by_the_garbage_collector() -> None:
    """No reference cycle through the loader's parts: persistent workers and pooled buffers
    go when the last reference does."""
    gc.disable()
    try:
        loader = DataLoader(ArrayDataset(N), batch_size=5, shuffle=True, device="cpu")
        list(loader)
        it = iter(loader)
        next(it)
        loader.state_dict()
        assert len(loader) == 5
        del it
        ref = weakref.ref(loader)
        del loader
        assert ref() is None
    finally:
        gc.enable()
