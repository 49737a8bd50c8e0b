"""The transform contract, read from the code: what an author writes (six names at most), what
``Transform`` holds, and no module of ``npu_data`` that tests a concrete transform's class."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import npu_data
from npu_data.transforms import Trait, Transform

AUTHOR = {"traits", "make_params", "apply", "reference", "output_size", "__init__"}
DERIVED = {"name", "__repr__", "__call__", "run", "get_params", "keyed", "draw_keyed"}
PLUMBING = {"riders", "__init_subclass__"}  # built-in: the one-copy upload, the apply wrapper
PIPELINES = {"keyed", "draw_keyed", "run", "get_params", "__repr__"}  # Compose, containers
_IGNORED = {"__doc__", "__module__", "__dict__", "__weakref__", "__firstlineno__",
            "__static_attributes__", "__qualname__", "__annotations__", "__parameters__",
            "__orig_bases__", "__annotate_func__", "__annotations_cache__"}


def _members(cls: type) -> set[str]:
    return {k for k in vars(cls) if k not in _IGNORED}


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("npu_data."):
            out.append(sub)
            out.extend(_subclasses(sub))
    return sorted(set(out), key=lambda c: c.__name__)


def test_transform_holds_the_contract_and_what_the_base_derives() -> None:
    members = _members(Transform)  # __init__ is object's: an author's own, if any
    assert members == (AUTHOR - {"__init__"}) | DERIVED | PLUMBING, sorted(members)
    assert len(members) == 14
    assert len(AUTHOR) == 6
    assert {m for m in members if not m.startswith("__")} == {
        "traits", "make_params", "apply", "reference", "output_size", "name", "run",
        "get_params", "keyed", "draw_keyed", "riders"}


def test_the_traits_are_a_small_public_enum() -> None:
    assert [t.name for t in Trait] == ["CROP", "FILLS", "HFLIP", "PER_PIXEL", "SAME_SIZE",
                                       "NO_PIXELS", "LATENTS", "FLOAT_IN"]
    with pytest.raises(npu_data.UserError, match="traits must be a set"):
        type("Bad", (Transform,), {"traits": {"crop"}})


@pytest.mark.parametrize("cls", _subclasses(Transform), ids=lambda c: c.__name__)
def test_a_transform_defines_only_contract_names(cls: type) -> None:
    """Every built-in transform overrides only the author's names (and the upload hook);
    pipelines (``Compose``, the containers: they hold ``transforms``) also their draws."""
    overridden = _members(cls) & (AUTHOR | DERIVED | PLUMBING)
    allowed = AUTHOR | {"riders"}
    if "transforms" in inspect.signature(cls).parameters:
        allowed |= PIPELINES
    assert overridden <= allowed, (cls.__name__, sorted(overridden - allowed))


def test_no_module_tests_a_concrete_transform_class() -> None:
    """``isinstance`` / ``issubclass`` / ``type(x) is`` on any transform class but the base
    ``Transform``, anywhere in npu_data: pipelines read traits, loaders ask for hooks."""
    names = {c.__name__ for c in _subclasses(Transform)}
    assert {"RandomResizedCrop", "ResizeCrop", "Compose", "_CropBase"} <= names
    pattern = re.compile(r"(?:isinstance|issubclass)\([^()]*?,\s*\(?([\w.| ,]+)\)?\)"
                         r"|type\([^()]*\)\s+(?:is|==)\s+(\w+)")
    root = Path(npu_data.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            tested = {n.strip().split(".")[-1] for n in re.split(r"[|,]", m.group(1) or
                                                                  m.group(2) or "")}
            if tested & names:
                found.append(f"{path.relative_to(root)}: {m.group(0)}")
    assert not found, found


def test_crops_return_typed_params_that_read_as_a_dict() -> None:
    """A crop's ``make_params`` returns ``CropParams``: typed fields, the same tensors under
    the keys its ``apply`` reads, read-only, pickled and replaced by its fields, and applied
    the same as the plain dict of those keys (what a pipeline's flat dict and the loader
    hand back)."""
    import dataclasses
    import pickle

    import numpy as np
    import torch

    from npu_data.transforms import (
        CenterCrop,
        Compose,
        CropParams,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        ResizeCenterCrop,
        ResizeCrop,
    )
    from npu_data.transforms.draws import child_position, sample_keys

    sizes = np.array([[30, 50], [41, 17], [1, 9]], np.int64)
    keys = sample_keys(3, 0, np.arange(3))
    batch = {"image": torch.randint(0, 256, (3, 3, 41, 50), dtype=torch.uint8),
             "sizes": torch.from_numpy(sizes)}
    crops = [RandomResizedCrop(24), Resize(16), Resize((16, 20)), CenterCrop(20),
             ResizeCenterCrop(16), ResizeCrop((16, 12)), ResizeCrop((16, 12), crop="random")]
    windows = 0
    for t in crops:
        params = t.draw_keyed(sizes, keys)
        assert isinstance(params, CropParams) and CropParams.of(params) is params, t
        fields = (params.boxes, params.windows, params.out, params.top_left)
        assert [k for k, v in zip(CropParams.KEYS, fields, strict=True) if v is not None] == \
            list(params), t
        assert all(params[k] is v for k, v in zip(CropParams.KEYS, fields, strict=True)
                   if v is not None)
        windows += params.windows is not None
        with pytest.raises(TypeError, match="read-only"):
            params["boxes"] = params.boxes
        with pytest.raises(TypeError, match="read-only"):
            params.update(boxes=params.boxes)
        again = pickle.loads(pickle.dumps(params))
        assert isinstance(again, CropParams) and list(again) == list(params)
        assert all(torch.equal(again[k], params[k]) for k in params)
        moved = dataclasses.replace(params, boxes=params.boxes + 1)
        assert torch.equal(moved["boxes"], params.boxes + 1) and moved.top_left is params.top_left
        plain = CropParams.of(dict(params))
        assert type(plain) is CropParams and list(plain) == list(params)
        assert torch.equal(t.apply(batch, params)["image"], t.apply(batch, dict(params))["image"])
        own = t.draw_keyed(sizes, keys, child_position(0, 0))  # as stage 0 of a pipeline
        flat = Compose([t, RandomHorizontalFlip(0.0)]).draw_keyed(sizes, keys)
        assert [k for k in flat if k.startswith("0.")] == [f"0.{k}" for k in own]
        assert all(torch.equal(flat[f"0.{k}"], own[k]) for k in own), t
    assert 0 < windows < len(crops)  # box crops and window crops both
    with pytest.raises(TypeError, match="boxes must be a tensor"):
        CropParams({"boxes": torch.zeros(1, 4)})  # type: ignore[arg-type]
