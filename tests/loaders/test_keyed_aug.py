"""A sample's augmentation depends only on (seed, epoch, sample): not on the batch size,
workers, prefetch depth or resume point (world sizes: test_distributed.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from loaders_fakes import ArrayDataset

from npu_data.loaders import DataLoader
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    draws,
)
from npu_data.transforms.pipeline import sample_ids as _sample_ids

N = 30


def _augment() -> Compose:
    return Compose([RandomResizedCrop(16), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def _per_sample(loader: DataLoader, epochs: int = 1) -> dict[tuple[int, int], dict[str, Any]]:
    """(epoch, index) -> that sample's image, boxes and parameters as the loader served them."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for _ in range(epochs):
        epoch = loader.epoch
        for batch in loader:
            for j, i in enumerate(batch["index"].tolist()):
                out[(epoch, i)] = {
                    "image": batch["image"][j].clone(),
                    "boxes": batch["boxes.xyxy"][j][batch["boxes.valid"][j]].clone(),
                    "params": {k: v[j].clone() for k, v in batch["aug"].items()},
                }
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        x, y = a[key], b[key]
        assert torch.equal(x["image"], y["image"]), key
        assert torch.equal(x["boxes"], y["boxes"]), key
        for k in x["params"]:
            assert torch.equal(x["params"][k], y["params"][k]), (key, k)


def _loader(**kw: Any) -> DataLoader:
    args: dict[str, Any] = {"batch_size": 8, "shuffle": True, "device": "cpu",
                            "transform": _augment(), "seed": 7}
    args.update(kw)
    return DataLoader(ArrayDataset(N, max_side=32), **args)


def test_batch_size_workers_and_prefetch_do_not_change_a_sample() -> None:
    ref = _per_sample(_loader(), epochs=2)
    for kw in ({"batch_size": 5, "num_workers": 2}, {"batch_size": 3, "device_prefetch": 0},
               {"batch_size": 30, "device_prefetch": 4, "shuffle": False},
               {"batch_size": 7, "num_workers": 1, "drop_last": False}):
        _assert_same(ref, _per_sample(_loader(**kw), epochs=2))


def test_a_new_epoch_or_seed_gives_new_parameters() -> None:
    got = _per_sample(_loader(), epochs=2)
    other = _per_sample(_loader(seed=8))
    changed = sum(not torch.equal(got[(0, i)]["image"], got[(1, i)]["image"]) for i in range(N))
    reseeded = sum(not torch.equal(got[(0, i)]["image"], other[(0, i)]["image"])
                   for i in range(N))
    assert changed == N and reseeded == N


def test_mid_epoch_resume_serves_the_same_samples() -> None:
    ref = _per_sample(_loader(batch_size=4))
    loader = _loader(batch_size=4)
    head: dict = {}
    for k, batch in enumerate(loader):
        for j, i in enumerate(batch["index"].tolist()):
            head[(0, i)] = batch["image"][j].clone()
        if k == 2:
            state = loader.state_dict()
            break
    fresh = _loader(batch_size=6, num_workers=1)  # a different batch size after the resume
    fresh.load_state_dict(state)
    tail = _per_sample(fresh)
    assert len(head) == 12 and len(tail) == N - 12 and not head.keys() & tail.keys()
    for key, image in head.items():
        assert torch.equal(image, ref[key]["image"])
    for key, rec in tail.items():
        assert torch.equal(rec["image"], ref[key]["image"])


def test_parameters_are_a_pure_function_of_the_key() -> None:
    augment = _augment()
    sizes = np.array([[20, 30], [31, 17], [12, 12], [40, 25]])
    ids = np.array([5, 9, 2, 11])
    whole = augment.draw_keyed(sizes, draws.sample_keys(3, 1, ids))
    order = [2, 0, 3, 1]
    shuffled = augment.draw_keyed(sizes[order], draws.sample_keys(3, 1, ids[order]))
    for k, v in whole.items():
        assert torch.equal(v[order], shuffled[k]), k
        one = augment.draw_keyed(sizes[1:2], draws.sample_keys(3, 1, ids[1:2]))
        assert torch.equal(one[k][0], v[1]), k
    assert whole["0.boxes"].dtype == torch.int64 and whole["1.brightness"].dtype == torch.float32


def test_keys_change_with_every_input_and_string_ids_are_stable() -> None:
    base = draws.sample_keys(1, 0, [0, 1, 2])
    assert len(set(base.tolist())) == 3
    assert not np.array_equal(base, draws.sample_keys(2, 0, [0, 1, 2]))
    assert not np.array_equal(base, draws.sample_keys(1, 1, [0, 1, 2]))
    assert np.array_equal(draws.string_ids(["a/b", "c"]), draws.string_ids(["a/b", "c"]))
    assert draws.string_ids(["a/b"])[0] != draws.string_ids(["a/c"])[0]
    d = draws.Draws(base, position=0)
    u1, u2 = d.uniform(3), d.uniform(3)
    assert u1.shape == (3, 3) and ((u1 >= 0) & (u1 < 1)).all() and not np.array_equal(u1, u2)
    assert not np.array_equal(draws.Draws(base, 1).uniform(3), u1)


def test_sample_ids_from_index_or_key() -> None:
    assert _sample_ids({"index": torch.tensor([3, 4])}).tolist() == [3, 4]
    keyed = _sample_ids({"__key__": ["x/1", "x/2"]})
    assert keyed is not None and np.array_equal(keyed, draws.string_ids(["x/1", "x/2"]))
    assert _sample_ids({"image": torch.zeros(1)}) is None


def test_generic_callables_and_tuple_batches_keep_the_generator_path() -> None:
    loader = _loader(transform=lambda b, generator=None: b)
    assert "aug" not in next(iter(loader))


def test_passes_over_an_epoch_nobody_advanced_still_get_new_augmentation() -> None:
    def passes(loader: DataLoader) -> list[torch.Tensor]:
        return [torch.cat([b["image"] for b in loader]) for _ in range(2)]

    first = passes(_loader(sampler=list(range(N)), shuffle=None))
    again = passes(_loader(sampler=list(range(N)), shuffle=None))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert all(not torch.equal(first[0][i], first[1][i]) for i in range(N))
