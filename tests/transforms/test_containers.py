"""RandomChoice, RandomApply, RandomOrder (torchvision's containers, one keyed draw per batch)
and MixUp / CutMix reading the label column a batch has (``choices.label`` (B, 1), the class
count from the dataset's labels)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import (
    ColorJitter,
    Compose,
    CutMix,
    MixUp,
    RandomApply,
    RandomChoice,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomOrder,
)
from npu_data.transforms.base import stage_params
from npu_data.transforms.draws import sample_keys


def _batch(b: int = 8, seed: int = 0, column: str = "label") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 5, (b,), generator=g)
    batch = {"image": torch.randint(0, 256, (b, 3, 20, 20), generator=g, dtype=torch.uint8),
             "sizes": torch.tensor([[20, 20]] * b)}
    if column == "label":
        batch["label"] = labels
    else:
        batch["choices.label"] = labels.to(torch.int32)[:, None]
        batch["choices.valid"] = torch.ones(b, 1, dtype=torch.bool)
    return batch


def _keyed(t: Any, batch: dict[str, torch.Tensor], ids: np.ndarray) -> dict[str, torch.Tensor]:
    return t.draw_keyed(batch["sizes"].numpy(), sample_keys(3, 0, ids))


def test_random_choice_picks_one_per_batch_keyed_in_any_order() -> None:
    pick = RandomChoice([MixUp(num_classes=5), CutMix(num_classes=5)])
    seen = set()
    for first in range(0, 400, 8):
        ids = np.arange(first, first + 8)
        batch = _batch(seed=first)
        params = _keyed(pick, batch, ids)
        choice = int(params["choice"][0])
        assert (params["choice"] == choice).all()
        seen.add(choice)
        again = _keyed(pick, batch, ids[::-1].copy())  # the same samples, another order
        assert int(again["choice"][0]) == choice
        out = pick.apply(batch, params)
        child = pick.transforms[choice]
        want = child.apply(batch, stage_params(params, choice))
        assert torch.equal(out["image"], want["image"])
        assert torch.equal(out["label"], want["label"]) and out["label"].shape == (8, 5)
    assert seen == {0, 1}
    odds = RandomChoice([MixUp(num_classes=5), CutMix(num_classes=5)], p=[1, 0])
    assert {int(_keyed(odds, _batch(), np.arange(i, i + 8))["choice"][0])
            for i in range(0, 80, 8)} == {0}
    out, params = pick.run(_batch(), torch.Generator().manual_seed(0))  # a generator too
    assert out["label"].shape == (8, 5)


def test_random_apply_and_random_order() -> None:
    on = []
    for first in range(0, 800, 8):
        t = RandomApply([RandomHorizontalFlip(1.0)], p=0.3)
        batch = _batch(seed=1)
        params = _keyed(t, batch, np.arange(first, first + 8))
        out = t.apply(batch, params)
        applied = bool(params["apply"][0])
        on.append(applied)
        assert torch.equal(out["image"], batch["image"].flip(-1) if applied else batch["image"])
    assert 0.2 < float(np.mean(on)) < 0.4
    order = RandomOrder([ColorJitter(brightness=0.5), RandomGrayscale(1.0)])
    orders = set()
    for first in range(0, 160, 8):
        batch = _batch(seed=2)
        params = _keyed(order, batch, np.arange(first, first + 8))
        perm = [int(v) for v in params["order"][0]]
        orders.add(tuple(perm))
        out = order.apply(batch, params)
        want = batch
        for i in perm:
            want = order.transforms[i].apply(want, stage_params(params, i))
        assert torch.equal(out["image"], want["image"])
    assert orders == {(0, 1), (1, 0)}


def test_containers_in_a_keyed_compose_and_bad_arguments() -> None:
    pipe = Compose([RandomHorizontalFlip(), RandomChoice([MixUp(num_classes=5),
                                                          CutMix(num_classes=5)])])
    assert pipe.keyed
    batch = _batch()
    out = pipe.apply(batch, _keyed(pipe, batch, np.arange(8)))
    assert out["label"].shape == (8, 5)
    for make, message in [(lambda: RandomChoice([]), "at least one"),
                          (lambda: RandomChoice([MixUp()], p=[1, 2]), "odds"),
                          (lambda: RandomChoice([MixUp()], p=[0]), "odds"),
                          (lambda: RandomApply([MixUp()], p=1.5), "probability"),
                          (lambda: RandomOrder([MixUp(), "flip"]), "not an npu_data")]:
        with pytest.raises(UserError, match=message) as info:
            make()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_mixing_reads_choices_label_and_the_datasets_class_count(cls: type) -> None:
    batch = _batch(column="choices")
    plain = dict(_batch(column="label"))
    t = cls()
    with pytest.raises(UserError, match="pass num_classes"):
        t(batch, torch.Generator().manual_seed(0))
    t.take_classes({"quality": ["bad", "good", "ok", "great", "meh"]})
    params = _keyed(t, batch, np.arange(8))
    out = t.apply(batch, params)
    want = cls(num_classes=5).apply(plain, params)
    assert torch.equal(out["label"], want["label"]) and out["label"].shape == (8, 5)
    assert torch.equal(out["choices.label"], batch["choices.label"])  # the column as it was
    two = dict(batch, **{"choices.label": batch["choices.label"].repeat(1, 2),
                         "choices.valid": torch.ones(8, 2, dtype=torch.bool)})
    with pytest.raises(UserError, match="one class per sample"):
        t.apply(two, params)
    none = dict(batch, **{"choices.valid": torch.zeros(8, 1, dtype=torch.bool)})
    with pytest.raises(UserError, match="one class per sample"):
        t.apply(none, params)
    several = cls()
    several.take_classes({"a": ["x", "y"], "b": ["z"]})
    with pytest.raises(UserError, match="pass num_classes"):
        several.apply(batch, params)
