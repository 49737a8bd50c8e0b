"""Equality of samples and batches, key by key, for the tests that read the same data two ways.

From strictest to loosest: ``same_batch`` / ``same_value`` (a collate's output: types, dtypes,
shapes, strides and values, NaN equal to NaN, no aliased inner lists); ``same_loader_batch``
(DataLoader batches: strides may differ across processes, ``batch["aug"]`` compared key by key);
``same_nested`` (samples or batches of any nesting, strides free); ``same_as_torch`` (a batch of
ours against torch's DataLoader's, on the CPU); ``same_sample`` (a store's sample after a round
trip through another format: its index aside, derived corners to float32 rounding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

DERIVED = ("boxes.corners", "boxes.xyxy")  # recomputed from xywhr when read back


def same_value(x: Any, y: Any, key: str) -> None:
    """``x`` and ``y`` alike in type, dtype, shape, strides and every value."""
    assert type(x) is type(y), key
    if isinstance(x, torch.Tensor):
        assert (x.dtype, x.shape, x.stride()) == (y.dtype, y.shape, y.stride()), key
        if x.is_floating_point():
            assert torch.equal(x.isnan(), y.isnan()), key
            x, y = x.nan_to_num(), y.nan_to_num()
        assert torch.equal(x, y), key
    elif isinstance(x, np.ndarray):
        assert (x.dtype, x.shape) == (y.dtype, y.shape), key
        np.testing.assert_array_equal(x, y, err_msg=key)
    elif isinstance(x, list):
        assert len(x) == len(y), key
        for a, b in zip(x, y, strict=True):
            same_value(a, b, key)
        assert len({id(v) for v in y if isinstance(v, list)}) == sum(
            isinstance(v, list) for v in y), key  # no aliased inner lists
    else:
        assert x == y, key


def same_batch(expected: dict, got: dict) -> None:
    """Two collated batches alike key for key (same keys in the same order), ``same_value``."""
    assert list(got) == list(expected)
    for key in expected:
        same_value(expected[key], got[key], key)


def same_loader_batch(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """Two DataLoader batches alike key for key and bit for bit; tensors' strides aside (they
    differ across processes), ``batch["aug"]`` (the parameters) compared key by key."""
    assert list(got) == list(expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            same_loader_batch(value, got[key])
        elif isinstance(value, torch.Tensor):
            other = got[key]
            assert (value.dtype, value.shape) == (other.dtype, other.shape), key
            assert torch.equal(value.nan_to_num(), other.nan_to_num()), key
        else:
            same_value(value, got[key], key)


def same_nested(x: Any, y: Any, key: str = "") -> None:
    """Samples or batches of dicts, lists and tuples alike at every level (NaN equal to NaN)."""
    assert type(x) is type(y), key
    if isinstance(x, dict):
        assert list(x) == list(y), key
        for k in x:
            same_nested(x[k], y[k], f"{key}.{k}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), key
        for a, b in zip(x, y, strict=True):
            same_nested(a, b, key)
    elif isinstance(x, torch.Tensor):
        assert (x.dtype, x.shape) == (y.dtype, y.shape), key
        assert torch.equal(x.nan_to_num(), y.nan_to_num()), key
    elif isinstance(x, np.ndarray):
        assert (x.dtype, x.shape) == (y.dtype, y.shape), key
        np.testing.assert_array_equal(x, y, err_msg=key)
    else:
        assert x == y, key


def same_as_torch(ours: Any, theirs: Any, where: str = "batch") -> None:
    """A batch of ours equal to torch's DataLoader's: types, dtypes, shapes, values, on the
    CPU; ``where`` names the element that differs."""
    assert type(ours) is type(theirs), f"{where}: {type(ours)} != {type(theirs)}"
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        assert ours.device.type == "cpu" and torch.equal(ours, theirs), where
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for k in theirs:
            same_as_torch(ours[k], theirs[k], f"{where}[{k!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            same_as_torch(a, b, f"{where}[{i}]")
    elif isinstance(theirs, np.ndarray):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), where
    else:
        assert ours == theirs, where


def same_sample(a: dict, b: dict) -> None:
    """A store's sample and the same sample read back from another format: the same keys and
    values, the index aside; corners and xyxy boxes (recomputed from xywhr) to float32
    rounding."""
    assert set(a) == set(b)
    for k, va in a.items():
        vb = b[k]
        if k == "index":
            continue
        if isinstance(va, np.ndarray):
            if k in DERIVED:
                np.testing.assert_allclose(vb, va, rtol=1e-6, atol=1e-4, err_msg=k)
            else:
                assert va.dtype == np.asarray(vb).dtype, k
                np.testing.assert_array_equal(vb, va, err_msg=k)
        else:
            assert va == vb, k
