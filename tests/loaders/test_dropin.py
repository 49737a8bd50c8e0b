"""DataLoader as a drop-in for torch's: the same batches for any sample structure, every
torch argument accepted, the device transform on tuple batches."""

from __future__ import annotations

import inspect
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler, TensorDataset

from npu_data.common.compat import DATALOADER_ARGS
from npu_data.errors import UserError
from npu_data.loaders import DataLoader
from tests.support.compare import same_as_torch

N = 10
Pair = namedtuple("Pair", ["x", "y"])


class ImageLabel(torch.utils.data.Dataset):
    """(HWC uint8 ndarray image, int label), like a torchvision dataset without ToTensor."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return np.full((6, 5, 3), i, np.uint8), i % 3


class ListSamples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> list[Any]:
        return [np.arange(3, dtype=np.float32) + i, i, f"s{i}"]


class NamedSamples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> Any:
        return Pair(torch.full((2,), float(i)), i)


class NestedDicts(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"a": {"b": np.arange(3) + i, "c": float(i)}, "d": (i, i + 1), "s": f"x{i}"}


class Ints(IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(N))


class WithSampleTransform(torch.utils.data.Dataset):
    """A torchvision-style dataset: ``transform`` is per sample, the loader must not use it."""

    transform = staticmethod(lambda x: x + 1000)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[int, int]:
        return i, -i


def _tensors() -> TensorDataset:
    return TensorDataset(torch.arange(4 * N, dtype=torch.float32).view(N, 4), torch.arange(N))


DATASETS = {
    "tensors": _tensors, "image_label": ImageLabel, "lists": ListSamples,
    "named": NamedSamples, "nested": NestedDicts, "iterable": Ints,
}
CONFIGS = {
    "b4": {"batch_size": 4},
    "b4_drop": {"batch_size": 4, "drop_last": True},
    "batch_sampler": {"batch_sampler": "seq3"},
    "unbatched": {"batch_size": None},
}


def keep(samples: list[Any]) -> list[Any]:
    return samples


def wrap(samples: Any) -> Any:
    return {"kind": type(samples).__name__, "got": samples}


def stack_x(samples: list[Any]) -> torch.Tensor:
    return torch.stack([torch.as_tensor(np.asarray(s[0])) for s in samples])


def _kwargs(config: dict[str, Any]) -> dict[str, Any]:
    kw = dict(config)
    if kw.get("batch_sampler") == "seq3":
        kw["batch_sampler"] = BatchSampler(SequentialSampler(range(N)), 3, drop_last=False)
    return kw


def _compare(make: Any, config: dict[str, Any], workers: int = 0, **extra: Any) -> None:
    theirs = list(torch.utils.data.DataLoader(make(), shuffle=False, num_workers=workers,
                                              **_kwargs(config), **extra))
    ours_loader = DataLoader(make(), shuffle=False, num_workers=workers, device="cpu",
                             **_kwargs(config), **extra)
    ours = list(ours_loader)
    assert len(ours) == len(theirs) > 0
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        same_as_torch(a, b, f"batch {i}")


def _pairs(configs: list[str]) -> list[tuple[str, str]]:
    """(dataset, config) pairs torch accepts: it refuses a batch_sampler for an iterable."""
    return [(n, c) for n in DATASETS for c in configs
            if not (n == "iterable" and c == "batch_sampler")]


@pytest.mark.parametrize(("name", "config"), _pairs(list(CONFIGS)))
def test_default_collate_matches_torch(name: str, config: str) -> None:
    _compare(DATASETS[name], CONFIGS[config])


def test_iterable_with_batch_sampler_is_refused_like_torch() -> None:
    kw = _kwargs(CONFIGS["batch_sampler"])
    with pytest.raises(ValueError, match="batch_sampler") as theirs:
        torch.utils.data.DataLoader(Ints(), **kw)
    with pytest.raises(ValueError, match="batch_sampler") as ours:
        DataLoader(Ints(), device="cpu", **kw)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("collate", [keep, wrap])
@pytest.mark.parametrize(("name", "config"), _pairs(["b4", "batch_sampler", "unbatched"]))
def test_custom_collate_matches_torch(name: str, config: str, collate: Any) -> None:
    _compare(DATASETS[name], CONFIGS[config], collate_fn=collate)


@pytest.mark.parametrize(("name", "config", "collate"), [
    ("tensors", "b4_drop", None), ("image_label", "b4", None), ("iterable", "b4", None),
    ("nested", "batch_sampler", keep), ("lists", "b4", stack_x),
])
def test_workers_match_torch(name: str, config: str, collate: Any) -> None:
    extra = {"collate_fn": collate} if collate is not None else {}
    _compare(DATASETS[name], CONFIGS[config], workers=2, **extra)


def test_collate_return_passes_through_any_type() -> None:
    _compare(_tensors, CONFIGS["b4"], collate_fn=stack_x)  # a bare tensor
    _compare(ImageLabel, CONFIGS["b4"], collate_fn=lambda s: tuple(s))  # a tuple


def test_signature_covers_torchs() -> None:
    theirs = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    ours = inspect.signature(DataLoader.__init__).parameters
    missing = [name for name in theirs if name not in ours]
    assert not missing, f"torch DataLoader arguments we do not accept: {missing}"
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    assert [n for n, p in theirs.items() if p.kind in positional] == [
        n for n, p in ours.items() if p.kind in positional]
    for name, p in theirs.items():
        assert ours[name].default == p.default, name


def test_torch_only_arguments_pass_through() -> None:
    if "in_order" not in DATALOADER_ARGS:  # torch < 2.6: refused unless left as before
        with pytest.raises(UserError, match=r"in_order=False needs a newer torch .* leave"):
            DataLoader(_tensors(), batch_size=4, device="cpu", in_order=False)
        loader = DataLoader(_tensors(), batch_size=4, device="cpu", in_order=True)
        _compare(_tensors, CONFIGS["b4"], workers=0)
        return
    loader = DataLoader(_tensors(), batch_size=4, device="cpu", in_order=False,
                        pin_memory_device="")
    assert loader.in_order is False and loader.pin_memory_device == ""
    _compare(_tensors, CONFIGS["b4"], workers=0, in_order=False)


def test_dataset_sample_transform_is_not_a_batch_transform() -> None:
    loader = DataLoader(WithSampleTransform(), batch_size=4, device="cpu")
    assert loader.transform is None
    same_as_torch(list(loader), list(torch.utils.data.DataLoader(WithSampleTransform(),
                                                               batch_size=4)))


def _flip(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    assert isinstance(generator, torch.Generator)
    return images.flip(-1)


def test_transform_applies_to_the_image_tensor_of_tuple_batches() -> None:
    images = torch.arange(N * 3 * 4 * 5, dtype=torch.int64).remainder(256).to(torch.uint8)
    ds = TensorDataset(torch.zeros(N), images.view(N, 3, 4, 5), torch.arange(N))
    ours = list(DataLoader(ds, batch_size=4, device="cpu", transform=_flip))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=4))
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is list and len(a) == 3
        assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
        assert torch.equal(a[1], b[1].flip(-1))
    named = list(DataLoader(ds, batch_size=4, device="cpu", transform=_flip,
                            collate_fn=lambda s: Pair(torch.stack([t[1] for t in s]), len(s))))
    assert type(named[0]) is Pair and named[0].y == 4
    assert torch.equal(named[0].x, theirs[0][1].flip(-1))


def test_transform_without_an_image_tensor_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no uint8 \\(B, C, H, W\\) image tensor"):
        list(DataLoader(_tensors(), batch_size=4, device="cpu", transform=_flip))
    with pytest.raises(UserError, match="channels-last"):
        list(DataLoader(ImageLabel(), batch_size=4, device="cpu", transform=_flip))
