"""Placement (loaders.placement): the keyed pipeline in the main process after the copy or
where each batch is assembled (workers, the read thread) gives the same bytes, whatever the
worker count or batch split; resume works there; threads fit the cores."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

from npu_data.common import compiled
from npu_data.errors import UserError
from npu_data.loaders import DataLoader, placement
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import (
    ColorJitter,
    Compose,
    Normalize,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    TrivialAugmentWide,
)
from npu_data.transforms.pipeline import Pipeline
from tests.support.compare import same_loader_batch


def _pipeline() -> Compose:
    return Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip(), Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.25])])


def _batches(ds: ShardDataset, transform: Any = None, epochs: int = 2,
             **kw: Any) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"batch_size": 6, "shuffle": True, "seed": 3, "device": "cpu",
                            "transform": transform if transform is not None else _pipeline()}
    args.update(kw)
    loader = DataLoader(ds, **args)
    return [b for _ in range(epochs) for b in loader]


def _rows(batches: list[dict[str, Any]]) -> dict[int, torch.Tensor]:
    return {int(i): b["image"][j] for b in batches for j, i in enumerate(b["index"])}


class _MainRuns:
    """Counts the main process's runs of the pipeline."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.finished = self.in_assembler = 0
        finish, run = Pipeline.finish, placement.WorkerPipeline.run

        def counted(*args: Any, **kw: Any) -> Any:
            self.finished += 1
            return finish(*args, **kw)

        def assembled(*args: Any, **kw: Any) -> Any:  # its finish runs in the assembler
            self.in_assembler += 1
            return run(*args, **kw)

        monkeypatch.setattr(Pipeline, "finish", counted)
        monkeypatch.setattr(placement.WorkerPipeline, "run", assembled)

    @property
    def calls(self) -> int:
        """The pipeline's runs in this process outside an assembler."""
        return self.finished - self.in_assembler


@pytest.mark.slow
@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_every_placement_gives_the_same_bytes(stores: dict[str, ShardDataset], store: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ds = stores[store]
    device = _batches(ds, augment_on="device")
    main = _MainRuns(monkeypatch)
    for kw in ({"augment_on": "workers"}, {"augment_on": "workers", "read_thread": False},
               {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True},
               {"augment_on": "workers", "read_crop": False, "num_workers": 2}):
        got = _batches(ds, **kw)
        assert len(got) == len(device) == 8
        for a, b in zip(device, got, strict=True):
            same_loader_batch(a, b)  # every key: image (float), sizes, geometry, ..., aug
    assert main.calls == 0  # the workers (or the read thread) ran every batch
    assert device[0]["image"].dtype == torch.float32


def test_a_sample_does_not_depend_on_the_batch_split(stores: dict[str, ShardDataset]) -> None:
    ds = stores["encoded"]
    device = _rows(_batches(ds, augment_on="device", epochs=1))
    for kw in ({"batch_size": 4, "num_workers": 2}, {"batch_size": 5, "augment_on": "workers"}):
        split = _rows(_batches(ds, epochs=1, **kw))
        assert sorted(split) == sorted(device) == list(range(23))
        for i, image in device.items():
            assert torch.equal(image, split[i]), i


def test_the_recipe_in_the_workers_is_the_main_process_recipe(
        stores: dict[str, ShardDataset]) -> None:
    recipe = Compose([RandomResizedCrop(24), RandomHorizontalFlip(),
                      TrivialAugmentWide(interpolation="bilinear"),
                      RandomErasing(p=0.5, value=(124, 116, 104)), Normalize()])
    device = _batches(stores["raw"], recipe, augment_on="device")
    workers = _batches(stores["raw"], recipe, num_workers=2)
    for a, b in zip(device, workers, strict=True):
        same_loader_batch(a, b)


def test_a_changed_transform_under_persistent_workers(stores: dict[str, ShardDataset],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ds = stores["raw"]
    loader = DataLoader(ds, batch_size=6, shuffle=True, seed=3, device="cpu",
                        transform=_pipeline(), num_workers=2, persistent_workers=True)
    list(loader)
    loader.transform = Compose([RandomResizedCrop(16), RandomHorizontalFlip()])
    main = _MainRuns(monkeypatch)
    second = list(loader)  # the workers still hold the first transform: the main process runs
    assert main.calls == len(second) == 4
    reference = DataLoader(ds, batch_size=6, shuffle=True, seed=3, device="cpu",
                           transform=Compose([RandomResizedCrop(16), RandomHorizontalFlip()]),
                           augment_on="device")
    reference.set_epoch(1)
    for a, b in zip(list(reference), second, strict=True):
        same_loader_batch(a, b)
        assert b["image"].shape[-1] == 16


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch_in_the_workers(stores: dict[str, ShardDataset],
                                         num_workers: int) -> None:
    ds = stores["encoded"]
    args: dict[str, Any] = {"batch_size": 4, "shuffle": True, "seed": 5, "device": "cpu",
                            "transform": _pipeline(), "augment_on": "workers",
                            "num_workers": num_workers}
    whole = list(DataLoader(ds, **args))
    first = DataLoader(ds, **args)
    it = iter(first)
    seen = [next(it), next(it)]
    state = first.state_dict()
    del it
    resumed = DataLoader(ds, **args)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(seen) + len(rest) == len(whole) == 6
    for a, b in zip(whole, seen + rest, strict=True):
        same_loader_batch(a, b)


def test_workers_placement_says_why_it_cannot(stores: dict[str, ShardDataset]) -> None:
    ds = stores["raw"]
    with pytest.raises(UserError, match="augment_on='workers'.*collate_fn"):
        DataLoader(ds, batch_size=2, device="cpu", transform=_pipeline(),
                   collate_fn=lambda s: s, augment_on="workers")
    with pytest.raises(UserError, match="augment_on='workers'.*keyed"):
        DataLoader(ds, batch_size=2, device="cpu", transform=lambda b, generator=None: b,
                   augment_on="workers")
    with pytest.raises(UserError, match="augment_on='gpu'"):
        DataLoader(ds, batch_size=2, augment_on="gpu")
    for bad in (0, True, 1.5):
        with pytest.raises(UserError, match="threads="):
            DataLoader(ds, batch_size=2, threads=bad)


def test_auto_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(placement.PLACEMENT_ENV, raising=False)
    assert placement.in_workers("auto", accelerator=False, num_workers=2)
    assert not placement.in_workers("auto", accelerator=False, num_workers=0)
    assert not placement.in_workers("auto", accelerator=True, num_workers=8)
    assert placement.in_workers("workers", accelerator=True, num_workers=0)
    assert not placement.in_workers("device", accelerator=False, num_workers=2)
    monkeypatch.setenv(placement.PLACEMENT_ENV, "workers")
    assert placement.in_workers("auto", accelerator=True, num_workers=8)
    assert not placement.in_workers("device", accelerator=False, num_workers=2)
    monkeypatch.setenv(placement.PLACEMENT_ENV, "gpu")
    with pytest.raises(UserError, match="NPU_DATA_AUGMENT_ON='gpu' must be auto, device or"):
        placement.in_workers("auto", accelerator=False, num_workers=2)


def test_threads_fit_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(placement.THREADS_ENV, raising=False)
    monkeypatch.setattr(placement, "cores", lambda: 16)
    # the workers run the pipeline: the cores shared among them, the main process what is left
    assert placement.worker_threads(None, 4, True, False) == 4
    assert placement.worker_threads(None, 32, True, False) == 1
    assert placement.main_threads(None, 4, True, False) == 1
    assert placement.main_threads(None, 3, True, False) == 1  # 16 - 3 * 5
    assert placement.main_threads(None, 6, True, False) == 4  # 16 - 6 * 2
    # the main process runs it on the CPU: the cores the workers leave, one for each worker
    assert placement.main_threads(None, 4, False, False) == 12
    assert placement.main_threads(None, 20, False, False) == 1
    assert placement.worker_threads(None, 4, False, False) is None
    # an accelerator: the workers read and crop over the cores, the main process launches
    assert placement.worker_threads(None, 8, False, True) == 2
    assert placement.main_threads(None, 8, False, True) is None
    assert placement.worker_threads(3, 4, True, False) == 3  # the argument wins
    assert placement.main_threads(3, 4, True, False) == 4
    monkeypatch.setenv(placement.THREADS_ENV, "2")
    assert placement.worker_threads(None, 4, True, False) == 2
    assert placement.main_threads(None, 4, False, False) == 2
    monkeypatch.setenv(placement.THREADS_ENV, "many")
    with pytest.raises(UserError, match="NPU_DATA_THREADS='many'"):
        placement.worker_threads(None, 4, True, False)


def test_a_pass_sets_the_main_threads_and_restores_them(stores: dict[str, ShardDataset],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(placement.THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    loader = DataLoader(stores["raw"], batch_size=6, device="cpu", transform=_pipeline(),
                        num_workers=1, augment_on="device", threads=before + 1)
    during = []
    for _ in loader:
        during.append(torch.get_num_threads())
    assert set(during) == {before + 1}
    assert torch.get_num_threads() == before
    it = iter(loader)
    next(it)
    del it  # a pass left early restores them too
    assert torch.get_num_threads() == before
    init = DataLoader(stores["raw"], batch_size=6, device="cpu", transform=_pipeline(),
                      num_workers=2, threads=3).worker_init_fn
    assert init is not None
    try:
        init(0)  # what each worker runs first (one spawned: this process is not forked)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
        compiled.set_threads(0)


def test_the_worker_pipeline_travels_and_refuses_what_does_not() -> None:
    pipe = placement.WorkerPipeline()
    assert pipe.arm(_pipeline()) is not None and pipe.transform is not None
    assert pipe.arm(Compose([RandomResizedCrop(8)])) != placement.token_of(_pipeline())
    assert pipe.arm(lambda b: b) is None and pipe.transform is None  # does not pickle


_FORKED_WORKERS = """
import sys, torch
from npu_data.loaders import DataLoader
from npu_data.shards.reader import ShardDataset
from npu_data.transforms.pipeline import Pipeline
from npu_data.transforms import ColorJitter, Compose, RandomResizedCrop
torch.set_num_threads(2)
(torch.ones(4_000_000) * 2).sum()  # the parent's OpenMP team, as a model's forward makes it
def user_init(worker_id):  # a torch op that runs in parallel where torch has 2 threads
    (torch.ones(4_000_000) * 3).sum()
loader = DataLoader(ShardDataset(sys.argv[1]), batch_size=6, device="cpu", num_workers=2,
                    transform=Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4)]),
                    augment_on="workers", threads=2, worker_init_fn=user_init)
print(sum(len(b["index"]) for b in loader))
"""


@pytest.mark.slow
def test_forked_workers_with_threads_never_hang_in_torch(
        stores: dict[str, ShardDataset]) -> None:
    """A forked worker given 2 threads (a 4-core machine, 2 workers) after the parent ran a
    parallel torch op: torch's OpenMP team in the worker is the parent's without its threads,
    so a parallel torch op there (the user's init, a dataset, a torch kernel) hung forever
    while the loader set torch's threads in the workers; the kernels now get the threads."""
    done = subprocess.run([sys.executable, "-c", _FORKED_WORKERS, str(stores["raw"].path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "23"
