"""Seeds are checked when a sampler or loader is built, not when it is first iterated: an int
a generator takes, never a float or bool, one line naming the seed and the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from loaders_fakes import ArrayDataset

from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.loaders import BucketBatchSampler, DataLoader, NpuDistributedSampler

SIZES = np.array([[300, 400], [400, 300], [500, 500], [600, 400], [400, 600]] * 4)
BUILDERS: dict[str, Callable[[Any], Any]] = {
    "BucketBatchSampler": lambda seed: BucketBatchSampler(SIZES, 2, "sdxl", num_replicas=1,
                                                          rank=0, seed=seed),
    "NpuDistributedSampler": lambda seed: NpuDistributedSampler(list(range(20)), num_replicas=1,
                                                                rank=0, seed=seed),
    "DataLoader": lambda seed: DataLoader(ArrayDataset(6), batch_size=3, shuffle=True,
                                          device="cpu", seed=seed),
}


def _one_line(err: pytest.ExceptionInfo[UserError], who: str, seed: str) -> str:
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{who}: seed={seed} ")
    return text


@pytest.mark.parametrize("who", sorted(BUILDERS))
@pytest.mark.parametrize("seed", [2**64, 2**70, -(2**63) - 1])
def test_a_seed_past_what_a_generator_takes_is_refused_at_construction(who: str,
                                                                        seed: int) -> None:
    with pytest.raises(UserValueError) as err:
        BUILDERS[who](seed)
    text = _one_line(err, who, str(seed))
    assert "out of range" in text and "2**64 - 1" in text
    assert isinstance(err.value, ValueError)


NOT_SEEDS = [1.0, 0.5, float("nan"), True, False, np.bool_(True), "7", None]


@pytest.mark.parametrize(("who", "seed"), [(who, seed) for who in sorted(BUILDERS)
                                           for seed in NOT_SEEDS
                                           if not (who == "DataLoader" and seed is None)])
def test_floats_bools_and_strings_are_not_seeds(who: str, seed: Any) -> None:
    with pytest.raises(UserTypeError) as err:
        BUILDERS[who](seed)
    text = _one_line(err, who, repr(seed))
    assert "not an integer" in text and "e.g. seed=0" in text
    assert isinstance(err.value, TypeError)


def test_the_loader_refuses_negative_seeds_the_samplers_take_what_torch_takes() -> None:
    with pytest.raises(UserValueError) as err:
        BUILDERS["DataLoader"](-1)
    assert "from 0 to 2**64 - 1" in _one_line(err, "DataLoader", "-1")
    low = NpuDistributedSampler(list(range(20)), num_replicas=1, rank=0, seed=-(2**63))
    assert sorted(low) == list(range(20))
    with pytest.raises(UserValueError) as err:
        BUILDERS["BucketBatchSampler"](-(2**63) - 1)
    assert "from -2**63 to 2**64 - 1" in str(err.value)


@pytest.mark.parametrize("who", ["BucketBatchSampler", "NpuDistributedSampler"])
def test_the_samplers_edge_seeds_run_and_numpy_ints_equal_python_ints(who: str) -> None:
    top = BUILDERS[who](2**64 - 1)
    assert top.seed == 2**64 - 1 and type(top.seed) is int
    first = list(top)  # epoch 0 is seeded 2**64 - 1: a seed torch takes
    assert first and first == list(BUILDERS[who](np.uint64(2**64 - 1)))
    same = BUILDERS[who](np.int64(7))
    assert type(same.seed) is int and list(same) == list(BUILDERS[who](7))
    assert list(same) != list(BUILDERS[who](8))


def test_the_loader_keeps_the_low_63_bits_of_a_seed_or_of_its_generator() -> None:
    assert BUILDERS["DataLoader"](2**64 - 1).seed == 2**63 - 1
    assert BUILDERS["DataLoader"](np.uint64(2**63 + 5)).seed == 5
    g = torch.Generator()
    g.manual_seed(2**64 - 1)  # a generator's seed is its own: masked, never refused
    loader = DataLoader(ArrayDataset(6), batch_size=3, shuffle=True, device="cpu", generator=g)
    assert loader.seed == 2**63 - 1
    got = [b["index"].tolist() for b in BUILDERS["DataLoader"](np.int64(11))]
    assert got == [b["index"].tolist() for b in BUILDERS["DataLoader"](11)]
    assert sorted(sum(got, [])) == list(range(6))


@pytest.mark.parametrize(("seed", "says"), [
    (2**64, r"seed=18446744073709551616 is out of range \(must be between 0 and "
     r"18446744073709551615\)"),
    (-1, r"seed=-1 is out of range"),
    (1.0, r"seed=1.0 is not an integer"),
    (True, r"seed=True is not an integer")])
def test_a_loaded_seed_is_checked_like_a_passed_one_and_nothing_changes(seed: Any,
                                                                         says: str) -> None:
    loader = BUILDERS["DataLoader"](5)
    before = [b["index"].tolist() for b in BUILDERS["DataLoader"](5)]
    with pytest.raises(UserError, match=r"^DataLoader state: " + says) as err:
        loader.load_state_dict({**loader.state_dict(), "seed": seed})
    assert "\n" not in str(err.value) and "pass the state_dict() this loader saved" in str(
        err.value)
    assert loader.seed == 5 and [b["index"].tolist() for b in loader] == before


def test_a_loaded_seed_keeps_its_low_63_bits_and_a_state_without_one_keeps_the_loaders() -> None:
    top = BUILDERS["DataLoader"](2**64 - 1)
    saved = top.state_dict()
    assert saved["seed"] == 2**63 - 1  # what the loader kept: loads back as it is
    other = BUILDERS["DataLoader"](0)
    other.load_state_dict(saved)
    assert other.seed == 2**63 - 1
    assert [b["index"].tolist() for b in other] == [b["index"].tolist() for b in top]
    edited = BUILDERS["DataLoader"](0)
    edited.load_state_dict({**saved, "seed": 2**63 + 5})  # the same rule as seed=
    assert edited.seed == BUILDERS["DataLoader"](2**63 + 5).seed == 5
    kept = BUILDERS["DataLoader"](9)
    kept.load_state_dict({k: v for k, v in saved.items() if k != "seed"})
    assert kept.seed == 9
