"""DataLoader as a drop-in for torch's: the effect of each torch argument that test_dropin.py
does not exercise (sampler, shuffle, generator, worker_init_fn, timeout, persistent_workers,
prefetch_factor, multiprocessing_context, pin_memory), checked against torch's own loader;
and the one-line ``MixedSizes`` error for samples whose tensors/arrays differ in shape."""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.loaders import DataLoader, collate_samples
from npu_data.loaders.collate import MixedSizes
from npu_data.loaders.sampler import epoch_permutation
from tests.support.compare import same_as_torch

N = 8
FIX = ("resize them to one size in the dataset, store them as shards (padded batches with "
       "'sizes'), or pass a collate_fn")
WORKER_ENV = "NPU_DATA_TEST_WORKER_INIT"


class Indices(torch.utils.data.Dataset):
    """Sample ``i`` is ``i``: batches show the order the sampler served."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class WorkerSeed(torch.utils.data.Dataset):
    """(index, the worker's seed): the seed torch derives from the loader's generator."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return i, info.seed


class WorkerEnv(torch.utils.data.Dataset):
    """(index, what ``set_worker_env`` wrote into the worker's environment)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[int, str]:
        return i, os.environ.get(WORKER_ENV, "unset")


class Pids(torch.utils.data.Dataset):
    """The pid of the process that read the sample."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return os.getpid()


class Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> int:
        time.sleep(1.0)
        return i


class MixedImages(torch.utils.data.Dataset):
    """(CHW image, label): the last sample of a batch of 4 is smaller than the others."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        hw = (32, 32) if i < 3 else (30, 28)
        return torch.zeros((3, *hw), dtype=torch.uint8), i


class MixedArrays(torch.utils.data.Dataset):
    """{"img": HW float ndarray whose width varies, "y": int}."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"img": np.zeros((4, 5 if i == 0 else 4), np.float32), "y": i}


class Ragged(torch.utils.data.Dataset):
    """List samples of different lengths: torch's own RuntimeError, not a shape mix."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> list[int]:
        return list(range(i + 1))


def set_worker_env(worker_id: int) -> None:
    os.environ[WORKER_ENV] = f"worker{worker_id}"


def _both(make: Any, **kw: Any) -> tuple[list[Any], list[Any]]:
    """(our batches, torch's batches) for the same arguments."""
    ours = list(DataLoader(make(), device="cpu", **kw))
    theirs = list(torch.utils.data.DataLoader(make(), **kw))
    return ours, theirs


def _order(loader: Any) -> list[int]:
    return [int(i) for batch in loader for i in batch]


# --- sampler and shuffle ----------------------------------------------------------------------
def test_sampler_list_of_indices_matches_torch() -> None:
    ours, theirs = _both(Indices, batch_size=2, sampler=[5, 3, 1, 7])
    same_as_torch(ours, theirs)
    assert _order(ours) == [5, 3, 1, 7]


def test_shuffle_false_is_sequential_like_torch() -> None:
    ours, theirs = _both(Indices, batch_size=3, shuffle=False)
    same_as_torch(ours, theirs)
    assert _order(ours) == list(range(N))


def test_shuffle_true_is_a_seeded_permutation_per_epoch() -> None:
    n = 16
    loader = DataLoader(Indices(n), batch_size=4, shuffle=True, seed=3, device="cpu")
    first, second = _order(loader), _order(loader)
    assert sorted(first) == sorted(second) == list(range(n))
    assert first != second  # a new order every pass, like torch's RandomSampler
    # documented order: randperm seeded with seed + epoch (NpuDistributedSampler, one replica)
    assert first == epoch_permutation(n, 0, 3, True).tolist()
    assert second == epoch_permutation(n, 1, 3, True).tolist()
    twin = DataLoader(Indices(n), batch_size=4, shuffle=True, seed=3, device="cpu")
    assert [_order(twin), _order(twin)] == [first, second]
    other = DataLoader(Indices(n), batch_size=4, shuffle=True, seed=4, device="cpu")
    assert _order(other) != first


# --- worker arguments -------------------------------------------------------------------------
def test_generator_sets_the_worker_seeds_like_torch() -> None:
    def run(cls: Any, **kw: Any) -> list[Any]:
        return list(cls(WorkerSeed(), batch_size=2, shuffle=False, num_workers=2,
                        generator=torch.Generator().manual_seed(5), **kw))

    ours, theirs = run(DataLoader, device="cpu"), run(torch.utils.data.DataLoader)
    same_as_torch(ours, theirs)
    assert len({int(s) for batch in ours for s in batch[1]}) == 2  # one seed per worker


def test_worker_init_fn_runs_in_each_worker_like_torch() -> None:
    ours, theirs = _both(WorkerEnv, batch_size=2, num_workers=2, worker_init_fn=set_worker_env)
    same_as_torch(ours, theirs)
    assert {s for batch in ours for s in batch[1]} == {"worker0", "worker1"}
    assert WORKER_ENV not in os.environ  # it ran in the workers only


def test_timeout_raises_like_torch() -> None:
    errors = []
    for cls, kw in ((DataLoader, {"device": "cpu"}), (torch.utils.data.DataLoader, {})):
        with pytest.raises(RuntimeError, match="timed out") as err:
            list(cls(Slow(), num_workers=1, timeout=0.2, **kw))
        errors.append(err.value)
    assert type(errors[0]) is type(errors[1]) is RuntimeError
    assert str(errors[0]) == str(errors[1])


@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_workers_keep_their_processes_like_torch(persistent: bool) -> None:
    def pids(cls: Any, **kw: Any) -> tuple[set[int], set[int]]:
        loader = cls(Pids(), batch_size=2, num_workers=2, persistent_workers=persistent, **kw)
        return ({int(p) for b in loader for p in b}, {int(p) for b in loader for p in b})

    for first, second in (pids(DataLoader, device="cpu"), pids(torch.utils.data.DataLoader)):
        assert len(first) == 2 and os.getpid() not in first
        assert (first == second) is persistent


def test_prefetch_factor_is_validated_and_kept_like_torch() -> None:
    with pytest.raises(ValueError, match="prefetch_factor") as theirs:
        torch.utils.data.DataLoader(Indices(), num_workers=0, prefetch_factor=2)
    with pytest.raises(ValueError, match="prefetch_factor") as ours:
        DataLoader(Indices(), num_workers=0, prefetch_factor=2, device="cpu")
    assert str(ours.value) == str(theirs.value)
    loader = DataLoader(Indices(), num_workers=1, prefetch_factor=4, device="cpu")
    assert loader.prefetch_factor == 4
    assert loader.prefetch_factor == torch.utils.data.DataLoader(
        Indices(), num_workers=1, prefetch_factor=4).prefetch_factor


@pytest.mark.parametrize(("context", "workers"), [("bogus", 1), ("spawn", 0)])
def test_multiprocessing_context_is_validated_like_torch(context: str, workers: int) -> None:
    with pytest.raises(ValueError, match="multiprocessing_context") as theirs:
        torch.utils.data.DataLoader(Indices(), num_workers=workers,
                                    multiprocessing_context=context)
    with pytest.raises(ValueError, match="multiprocessing_context") as ours:
        DataLoader(Indices(), num_workers=workers, multiprocessing_context=context,
                   device="cpu")
    assert str(ours.value) == str(theirs.value)


def test_multiprocessing_context_spawn_is_kept() -> None:
    loader = DataLoader(Indices(), num_workers=1, multiprocessing_context="spawn", device="cpu")
    assert loader.multiprocessing_context.get_start_method() == "spawn"  # not iterated: slow


def test_pin_memory_on_the_cpu_gives_torchs_batches() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that no accelerator is found
        ours, theirs = _both(MixedArrays, batch_size=1, pin_memory=True)
    same_as_torch(ours, theirs)


# --- MixedSizes -------------------------------------------------------------------------------
def test_mixed_image_sizes_name_the_element_the_shapes_and_the_fix() -> None:
    with pytest.raises(MixedSizes) as err:
        list(DataLoader(MixedImages(), batch_size=4, device="cpu"))
    msg = str(err.value)
    assert "\n" not in msg
    for part in ("element 0", "(3, 32, 32) at batch position 0",
                 "(3, 30, 28) at batch position 3", FIX):
        assert part in msg
    assert isinstance(err.value, RuntimeError) and isinstance(err.value, UserError)
    assert "stack expects each tensor to be equal size" in str(err.value.__cause__)


def test_mixed_array_sizes_in_dicts_name_the_key() -> None:
    with pytest.raises(RuntimeError) as err:  # what code catching torch's error sees
        list(DataLoader(MixedArrays(), batch_size=4, device="cpu"))
    assert type(err.value) is MixedSizes
    assert "key 'img'" in str(err.value)
    assert "(4, 5) at batch position 0 and (4, 4) at batch position 1" in str(err.value)


def test_mixed_sizes_from_a_worker_reach_the_caller() -> None:
    # torch's ExceptionWrapper re-raises MixedSizes(msg) in the main process: the type
    # arrives, its message is "Caught MixedSizes in DataLoader worker process 0.\nOriginal
    # Traceback ..." ending with our one line. (torch's own loader, in a worker, says "Trying
    # to resize storage that is not resizable" when the first sample is the larger one: the
    # shared-memory output is sized from the first sample.)
    with pytest.raises(MixedSizes) as err:
        list(DataLoader(MixedImages(), batch_size=4, num_workers=1, device="cpu"))
    msg = str(err.value)
    assert msg.startswith("Caught MixedSizes in DataLoader worker process 0.")
    line = msg.rstrip().splitlines()[-1]
    assert line.startswith("npu_data.loaders.collate.MixedSizes: collate: element 0 ")
    assert "(3, 30, 28) at batch position 3" in line and line.endswith(FIX)
    assert isinstance(err.value, RuntimeError)
    with pytest.raises(RuntimeError) as theirs:
        list(torch.utils.data.DataLoader(MixedImages(), batch_size=4, num_workers=1))
    assert type(theirs.value) is RuntimeError


def test_other_collate_errors_propagate_unchanged() -> None:
    with pytest.raises(RuntimeError) as theirs:
        list(torch.utils.data.DataLoader(Ragged(), batch_size=2))
    with pytest.raises(RuntimeError) as ours:
        list(DataLoader(Ragged(), batch_size=2, device="cpu"))
    assert type(ours.value) is RuntimeError
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(("samples", "where"), [
    ([np.zeros((2, 3)), np.zeros((3, 3))], "the samples have"),
    ([{"a": (1, np.zeros(2))}, {"a": (2, np.zeros(3))}], "key 'a' → element 1 of the samples has"),
])
def test_mixed_sizes_paths(samples: list[Any], where: str) -> None:
    with pytest.raises(MixedSizes, match=f"^collate: {where} different shapes"):
        collate_samples(samples)


def _plus_one(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return images + 1


def test_image_key_picks_the_transformed_element() -> None:
    first = torch.zeros(6, 3, 4, 4, dtype=torch.uint8)
    second = torch.full((6, 3, 4, 4), 7, dtype=torch.uint8)
    ds = torch.utils.data.TensorDataset(first, second)
    a, b = next(iter(DataLoader(ds, batch_size=3, device="cpu", transform=_plus_one,
                                image_key=1)))
    assert int(a.max()) == 0 and int(b.min()) == 8  # element 1, not the first uint8 one
    dicts = DataLoader([{"img": first[i], "y": i} for i in range(6)], batch_size=3,
                       device="cpu", transform=_plus_one, image_key="img")
    batch = next(iter(dicts))
    assert int(batch["img"].min()) == 1 and batch["y"].tolist() == [0, 1, 2]
    with pytest.raises(UserError, match="image_key=5"):
        next(iter(DataLoader(ds, batch_size=3, device="cpu", transform=_plus_one,
                             image_key=5)))
    with pytest.raises(UserError, match="'pixels' is not a key"):
        next(iter(DataLoader([{"img": first[0]}], device="cpu", transform=_plus_one,
                             image_key="pixels")))
    with pytest.raises(UserError, match="must be a tuple position"):
        DataLoader(ds, device="cpu", image_key=1.5)  # type: ignore[arg-type]
