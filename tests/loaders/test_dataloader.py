"""DataLoader: device batches, transform seeding, resume, torch's validation, errors."""

from __future__ import annotations

import os

import psutil
import pytest
import torch
from loaders_fakes import ArrayDataset, noisy_flip

from npu_data.errors import UserError
from npu_data.loaders import DataLoader, LabelStudioDataset, NpuDistributedSampler


def _run(loader: DataLoader, limit: int | None = None) -> list[dict]:
    out = []
    for b in loader:
        out.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()})
        if limit is not None and len(out) == limit:
            break
    return out


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert torch.equal(x[k], y[k]), k
            else:
                assert x[k] == y[k], k


def test_batches_on_device_transformed_and_sized() -> None:
    ds = ArrayDataset(23)
    loader = DataLoader(ds, batch_size=5, device="cpu", transform=noisy_flip, seed=3)
    assert len(loader) == 5
    batches = _run(loader)
    assert [len(b["index"]) for b in batches] == [5, 5, 5, 5, 3]
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(23))
    assert all(b["image"].device.type == "cpu" and "flip" in b for b in batches)
    flips = torch.cat([b["flip"] for b in batches])
    assert 0 < int(flips.sum()) < 23  # per-sample randomness


def test_workers_and_prefetch_depth_do_not_change_results() -> None:
    ds = ArrayDataset(40)
    ref = _run(DataLoader(ds, batch_size=6, shuffle=True, device="cpu", transform=noisy_flip,
                          seed=5, num_workers=0, device_prefetch=0))
    for workers, depth in ((2, 1), (1, 4)):
        got = _run(DataLoader(ds, batch_size=6, shuffle=True, device="cpu",
                              transform=noisy_flip, seed=5, num_workers=workers,
                              device_prefetch=depth, persistent_workers=True))
        _same(ref, got)
    assert torch.cat([b["index"] for b in ref]).tolist() != list(range(40))


def test_shuffle_gives_a_new_order_each_pass() -> None:
    loader = DataLoader(ArrayDataset(30), batch_size=30, shuffle=True, device="cpu")
    first, second = (_run(loader)[0]["index"].tolist() for _ in range(2))
    assert sorted(first) == sorted(second) and first != second


@pytest.mark.parametrize("workers", [0, 2])
def test_mid_epoch_resume_equals_uninterrupted(workers: int) -> None:
    ds = ArrayDataset(37)

    def make() -> DataLoader:
        sampler = NpuDistributedSampler(ds, num_replicas=1, rank=0, seed=7)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, device="cpu",
                            transform=noisy_flip, seed=1, num_workers=workers)
        loader.set_epoch(2)
        return loader

    full = _run(make())
    first = make()
    head = _run(first, limit=3)
    state = first.state_dict()
    assert state["batches"] == 3 and state["sampler"]["consumed"] == 12
    resumed = make()
    resumed.set_epoch(0)
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    tail = _run(resumed)
    _same(head + tail, full)
    after = resumed.state_dict()  # the epoch is done: the next one, from its start
    assert (after["epoch"], after["batches"], after["sampler"]["consumed"]) == (3, 0, 0)


def test_default_sampler_resumes_and_a_finished_epoch_resumes_at_the_next() -> None:
    ds = ArrayDataset(19)
    full = _run(DataLoader(ds, batch_size=4, shuffle=True, device="cpu", seed=2))
    first = DataLoader(ds, batch_size=4, shuffle=True, device="cpu", seed=2)
    head = _run(first, limit=2)
    resumed = DataLoader(ds, batch_size=4, shuffle=True, device="cpu", seed=2)
    resumed.load_state_dict(first.state_dict())
    assert len(resumed) == 5  # the whole epoch, as torch's len(); the pass yields the rest
    tail = _run(resumed)
    assert len(tail) == 3
    _same(head + tail, full)
    done = DataLoader(ds, batch_size=4, shuffle=False, device="cpu")
    _run(done)
    state = done.state_dict()  # saved after a complete pass: the next epoch, from its start
    assert (state["epoch"], state["batches"]) == (1, 0)
    again = DataLoader(ds, batch_size=4, shuffle=False, device="cpu")
    again.load_state_dict(state)
    assert again.epoch == 1 and len(_run(again)) == 5


def test_sampler_with_shuffle_is_torchs_error() -> None:
    ds = ArrayDataset(4)
    with pytest.raises(ValueError) as ours:
        DataLoader(ds, sampler=NpuDistributedSampler(ds, 1, 0), shuffle=True, device="cpu")
    with pytest.raises(ValueError) as theirs:
        torch.utils.data.DataLoader(ds, sampler=list(range(4)), shuffle=True)
    assert str(ours.value) == str(theirs.value)


def test_npu_without_torch_npu_names_the_extra() -> None:
    with pytest.raises(UserError, match=r"npu-data\[npu\]"):
        DataLoader(ArrayDataset(2), device="npu")


def test_missing_export_is_a_clear_error(tmp_path: os.PathLike) -> None:
    with pytest.raises(UserError, match="export not found"):
        LabelStudioDataset(os.path.join(tmp_path, "nope.json"), cache_dir=tmp_path)
    with pytest.raises(UserError, match="unknown option"):
        (tmp_path / "e.json").write_text("[]")  # type: ignore[operator]
        LabelStudioDataset(tmp_path / "e.json", cache_dir=tmp_path, colour=1)  # type: ignore[operator]


def test_worker_private_memory_does_not_grow() -> None:
    ds = ArrayDataset(6000, max_side=16)
    loader = DataLoader(ds, batch_size=32, num_workers=2, device="cpu", shuffle=True,
                        persistent_workers=True)
    uss: dict[int, list[int]] = {}
    others = {c.pid for c in psutil.Process().children()}  # an earlier test's, in this process
    for i, _ in enumerate(loader):
        if i % 40 == 10:
            for child in psutil.Process().children():
                if child.pid not in others:
                    uss.setdefault(child.pid, []).append(child.memory_full_info().uss)
    assert len(uss) == 2
    for series in uss.values():
        assert series[-1] - series[0] < 8 << 20, series  # no per-sample copy-on-write growth


_INIT: list[int] = []


def _record_init(worker_id: int) -> None:
    _INIT.append(100 + worker_id)


class _WorkerState(ArrayDataset):
    """Samples that report the worker's init calls and frozen object count."""

    def __getitem__(self, i: int) -> dict:
        import gc

        return {**super().__getitem__(i), "init": list(_INIT), "frozen": gc.get_freeze_count()}


def test_workers_freeze_inherited_objects_and_run_the_user_init() -> None:
    loader = DataLoader(_WorkerState(8), batch_size=2, num_workers=2, device="cpu",
                        worker_init_fn=_record_init)
    batches = _run(loader)
    assert {tuple(i) for b in batches for i in b["init"]} == {(100,), (101,)}
    assert all(int(f) > 0 for b in batches for f in b["frozen"])
    assert _INIT == []  # the main process neither ran it nor froze anything for it
