"""The transform contract: one public ``apply(batch, params)`` signature, fusion by declared
traits (what a pipeline knows reaches a stage through ``base.context_of``), ``Compose.split``
for crop at read, stage parameters named in one place."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import npu_data.transforms as T
from npu_data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    Transform,
    draws,
)
from npu_data.transforms.base import (
    DEFAULT,
    ApplyContext,
    Batch,
    Params,
    Trait,
    context_of,
    stage_params,
    with_stage,
)
from npu_data.transforms.compose import Rest, Split, fusions, split
from tests.support.batches import random_padded

B = 8


def _keyed(t: Transform, batch: Batch, epoch: int = 0) -> Params:
    keys = draws.sample_keys(7, epoch, np.arange(B))
    return t.draw_keyed(batch["sizes"].numpy(), keys)


def _transform_classes() -> list[type[Transform]]:
    found = {obj for obj in vars(T).values()
             if inspect.isclass(obj) and issubclass(obj, Transform)}
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", [c for c in _transform_classes() if c is not Transform],
                         ids=lambda c: c.__name__)
def test_every_transform_has_the_one_apply_signature(cls: type[Transform]) -> None:
    names = list(inspect.signature(inspect.unwrap(cls.apply)).parameters)
    assert names == ["self", "batch", "params"], cls.__name__
    assert getattr(cls.apply, "__npu_checked__", False), cls.__name__  # the base wraps it


def test_stage_keys_round_trip_and_never_bleed_into_a_longer_index() -> None:
    own = {"boxes": torch.zeros(2, 4), "flip": torch.ones(2, dtype=torch.bool)}
    flat = {**with_stage(1, own), **with_stage(10, {"boxes": torch.ones(2, 4)})}
    assert set(flat) == {"1.boxes", "1.flip", "10.boxes"}
    back = stage_params(flat, 1)
    assert set(back) == {"boxes", "flip"}
    assert back["boxes"] is own["boxes"]
    assert set(stage_params(flat, 10)) == {"boxes"}
    assert stage_params(flat, 2) == {}


def test_fusions_follow_the_declared_capabilities() -> None:
    crop, jitter, flip = RandomResizedCrop(32), ColorJitter(0.4, 0.4), RandomHorizontalFlip()
    assert fusions([crop, jitter, flip]) == ({0: 2}, [False, True, True])
    assert fusions([crop, flip, jitter]) == ({0: 1}, [False, True, True])
    # Normalize commutes with a mirror but does not keep a uint8 full batch: no fold over it
    assert fusions([crop, Normalize(), flip]) == ({}, [False, True, False])
    # Resize(int) and CenterCrop may pad: no fold, the jitter after it is not told "full"
    for padded in (Resize(32), CenterCrop(32)):
        assert fusions([padded, jitter, flip]) == ({}, [False, False, False])
    assert fusions([jitter, flip], full=True) == ({}, [True, True])


class _Tint(Transform):
    """A user stage that declares it keeps a full batch and commutes with a mirror."""

    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})

    def __init__(self) -> None:
        self.seen: list[ApplyContext] = []

    def make_params(self, sizes: np.ndarray, rng: draws.Uniforms) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        self.seen.append(context_of(self))
        out = dict(batch)
        out["image"] = batch["image"] // 2
        return out


def test_a_stage_outside_the_package_fuses_by_what_it_declares() -> None:
    crop, tint, flip = RandomResizedCrop(32), _Tint(), RandomHorizontalFlip(0.5)
    assert fusions([crop, tint, flip]) == ({0: 2}, [False, True, True])
    pipe = Compose([crop, tint, flip])
    batch = random_padded(0, B, (40, 90), (40, 90))[1]
    params = _keyed(pipe, batch)
    fused = pipe.apply(batch, params)
    assert len(tint.seen) == 1 and tint.seen[0].full is True and tint.seen[0].flip is None
    # the same stages one by one, nothing fused: the same pixels
    alone = batch
    for i, t in enumerate(pipe.transforms):
        alone = t.apply(alone, stage_params(params, i))
    assert tint.seen[1] is DEFAULT
    assert torch.equal(fused["image"], alone["image"])


def test_split_of_a_keyed_pipeline_and_of_a_crop_alone() -> None:
    crop = RandomResizedCrop(32)
    pipe = Compose([crop, ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()])
    lead = pipe.split()
    assert isinstance(lead, Split) and lead.crop is crop
    assert lead.position == draws.child_position(0, 0)
    assert lead.rest.stages == tuple(pipe.transforms[1:]) and lead.rest.first == 1
    assert lead.rest.full is True
    assert split(pipe) == lead
    alone = split(crop)
    assert alone == Split(crop, 0, Rest())
    batch = random_padded(0, B, (40, 90), (40, 90))[1]
    assert alone.rest.apply(batch, {}) is batch
    padded = Compose([Resize(32), ColorJitter(0.4)]).split()
    assert padded is not None and padded.rest.full is False  # Resize(int) may pad


@pytest.mark.parametrize("stages", [
    [ColorJitter(0.4), RandomResizedCrop(32)],  # no leading crop
    [Compose([RandomResizedCrop(32)]), ColorJitter(0.4)],  # a nested Compose is not a crop
], ids=["jitter first", "nested"])
def test_split_refuses_what_a_reader_cannot_crop(stages: list[Transform]) -> None:
    assert Compose(stages).split() is None and split(Compose(stages)) is None
    assert split(ColorJitter(0.4)) is None
    assert split("not a transform") is None


def test_rest_with_the_whole_params_equals_the_whole_pipeline() -> None:
    """What a reader does (crop, then ``rest`` with the pipeline's params, a flip's mirroring
    of the crop included) gives the pixels and keys of applying the pipeline."""
    for pipe in (Compose([RandomResizedCrop(32), ColorJitter(0.4, 0.4, 0.4, 0.1),
                          RandomHorizontalFlip()]),
                 Compose([Resize(40), ColorJitter(0.3, 0.3), RandomHorizontalFlip(0.7)])):
        batch = random_padded(3, B, (40, 90), (40, 90))[1]
        params = _keyed(pipe, batch)
        whole = pipe.apply(batch, params)
        lead = pipe.split()
        assert lead is not None
        cropped = lead.crop.apply(batch, stage_params(params, 0))
        rest = lead.rest.apply(cropped, params)
        assert set(rest) == set(whole)
        for key, value in whole.items():
            assert torch.equal(rest[key], value), key
