"""collate_samples: sample dicts → one padded batch dict (docs/architecture.md).

Images are copied once, straight into a ``(B, Hmax, Wmax, 3)`` uint8 buffer that is returned
as its ``(B, 3, Hmax, Wmax)`` channels-last view; only the padding is zeroed. Inside a
DataLoader worker the buffers live in shared memory (no copy when the batch is sent to the
main process); with ``pin=True`` (main process) they are page-locked for the accelerator.
A ``ColumnBatch`` (``ShardDataset.__getitems__``'s ``SampleBatch``) is collated from its columns in one shot
(``collate_columns``) into the same batch; a stream's samples tagged for crop at read
(``stream_crop``) are collated from their geometry and stored sizes, each image's crop box
resized straight into the batch (the same batch as collating and cropping after). Any other
sample structure (tuples, lists, named tuples, tensors, numbers, plain dicts, nested) goes to
``torch.utils.data.default_collate``,
so the batch is exactly torch's; when it fails because the samples' tensors/arrays differ in
shape, ``MixedSizes`` says which element, which shapes and the fix in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from npu_data import device as dev
from npu_data.buffers import (
    image_sizes,
    images_tensor,
    sizes_tensor,
    torch_dtype,
    zeros_host,
)
from npu_data.common.batch import Batch, ColumnBatch, Sample
from npu_data.errors import UserError
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import PADDED_BY_NAME
from npu_data.loaders import stream_crop
from npu_data.loaders.collate_columns import collate_columns

Path = tuple[int | str, ...]
_MIXED_FIX = ("resize them to one size in the dataset, store them as shards (padded batches "
              "with 'sizes'), or pass a collate_fn")


class MixedSizes(UserError, RuntimeError):
    """Samples of one batch whose tensors/arrays at the same place differ in shape.

    A RuntimeError too, so code that catches torch's ``stack expects each tensor to be equal
    size`` keeps working."""


def _where(path: Path) -> str:
    """``element 0``, ``key 'image'``, nested ``key 'a' → element 1``."""
    return " → ".join(f"key {p!r}" if isinstance(p, str) else f"element {p}" for p in path)


def _shape(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return tuple(value.shape)
    return None


def find_mixed_sizes(samples: Sequence[Any], path: Path = ()
                     ) -> tuple[Path, tuple[int, ...], tuple[int, ...], int] | None:
    """The first place where ``default_collate`` would stack tensors/arrays of different
    shapes: ``(path, first shape, other shape, batch position of the other)``, or None.

    Walks the samples the way ``default_collate`` does (mappings by the first sample's keys,
    sequences by position); a structure that differs between samples ends the walk."""
    elem = samples[0]
    first = _shape(elem)
    if first is not None:
        for j, s in enumerate(samples):
            shape = _shape(s)
            if shape is not None and shape != first:
                return path, first, shape, j
        return None
    if isinstance(elem, Mapping):
        if not all(isinstance(s, Mapping) and all(k in s for k in elem) for s in samples):
            return None
        for key in elem:
            found = find_mixed_sizes([s[key] for s in samples], (*path, key))
            if found is not None:
                return found
        return None
    if isinstance(elem, (list, tuple)):
        if not all(isinstance(s, (list, tuple)) and len(s) == len(elem) for s in samples):
            return None
        for i in range(len(elem)):
            found = find_mixed_sizes([s[i] for s in samples], (*path, i))
            if found is not None:
                return found
    return None


def mixed_sizes_error(samples: Sequence[Any]) -> MixedSizes | None:
    """A one-line ``MixedSizes`` when the samples' tensors/arrays differ in shape, else None."""
    found = find_mixed_sizes(samples)
    if found is None:
        return None
    path, first, other, j = found
    subject = f"{_where(path)} of the samples has" if path else "the samples have"
    return MixedSizes(
        f"collate: {subject} different shapes within one batch: "
        f"{first} at batch position 0 and {other} at batch position {j} — {_MIXED_FIX}")


def _default_collate(samples: list[Any]) -> Any:
    """torch's ``default_collate``; mixed shapes raise ``MixedSizes`` (torch says ``stack
    expects each tensor to be equal size`` in the main process, ``Trying to resize storage
    that is not resizable`` in a worker when the first sample is the larger one)."""
    try:
        return default_collate(samples)
    except RuntimeError as err:
        mixed = mixed_sizes_error(samples)
        if mixed is None:
            raise
        raise mixed from err


def _pad_rows(arrays: Sequence[np.ndarray | None], counts: np.ndarray, nmax: int, pin: bool,
              fill: float) -> torch.Tensor:
    first = next((a for a in arrays if a is not None), None)
    tail = tuple(first.shape[1:]) if first is not None else ()
    dtype = torch_dtype(first.dtype) if first is not None else torch.float32
    if dtype in (torch.int8, torch.int16, torch.int32) and fill < 0:
        dtype = torch.int64  # labels: long, the dtype losses expect; -1 pads
    out = zeros_host((len(arrays), nmax, *tail), dtype, pin, fill)
    view = out.numpy()
    for i, a in enumerate(arrays):
        if a is not None and counts[i]:
            view[i, :counts[i]] = a
    return out


def _group(samples: Sequence[Sample], kind: Kind, keys: list[str], pin: bool, batch: Batch,
           hw: tuple[int, int]) -> None:
    b = len(samples)
    group = kind.name
    row = f"{group}.{kind.row_key}"
    counts = np.fromiter((len(s[row]) if row in s else 0 for s in samples), np.int64, count=b)
    nmax = int(counts.max()) if b else 0
    valid = torch.from_numpy(np.arange(nmax)[None, :] < counts[:, None])
    batch[f"{group}.valid"] = valid
    own = kind.own_keys()
    if nmax == 0:  # fast path: a group no sample of this batch uses
        _empty_group(samples[0], kind, [k for k in keys if k not in own], b, batch)
        kind.pad_empty(b, hw, batch)
        return
    kind.pad_samples(samples, counts, nmax, hw, pin, batch)
    for key in keys:
        if key in own:
            continue
        name = key.split(".", 1)[1]
        vals = [s.get(key) for s in samples]
        if any(isinstance(v, list) for v in vals) or not all(
                isinstance(v, np.ndarray) or v is None for v in vals):
            batch[key] = [list(v) if v is not None else [] for v in vals]
            continue
        if any(v is not None and len(v) != c for v, c in zip(vals, counts, strict=True)):
            batch[key] = [torch.from_numpy(np.ascontiguousarray(v)) if v is not None else None
                          for v in vals]
            continue
        fill = -1.0 if name == "label" else 0.0
        batch[key] = _pad_rows(vals, counts, nmax, pin, fill)


def _empty_group(first: Sample, kind: Kind, keys: list[str], b: int, batch: Batch) -> None:
    for key in keys:
        name = key.split(".", 1)[1]
        v = first[key]
        if isinstance(v, np.ndarray):
            dtype = torch_dtype(v.dtype)
            if name == "label" and dtype in (torch.int8, torch.int16, torch.int32):
                dtype = torch.int64
            batch[key] = torch.zeros((b, 0, *v.shape[1:]), dtype=dtype)
        else:
            batch[key] = [[] for _ in range(b)]


def is_shard_sample(sample: Any) -> bool:
    """True for our sample layout (``ShardDataset``'s dicts): a dict whose ``image`` is an
    HWC uint8 ndarray with 3 channels, or with ``<group>.<column>`` geometry keys."""
    if not isinstance(sample, Mapping):
        return False
    image = sample.get("image")
    if isinstance(image, np.ndarray):
        return image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    if image is not None:
        return False
    return any(isinstance(k, str) and k.split(".", 1)[0] in PADDED_BY_NAME and "." in k
               for k in sample)


def pin_tree(batch: Any) -> Any:
    """Page-lock every CPU tensor of a (nested) batch, keeping its structure."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.is_pinned() else batch.pin_memory()
    if isinstance(batch, Mapping):
        out = {k: pin_tree(v) for k, v in batch.items()}
        try:
            return type(batch)(out)  # type: ignore[call-arg]
        except TypeError:
            return out
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # named tuple
        return type(batch)(*(pin_tree(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(pin_tree(v) for v in batch)  # type: ignore[call-arg]
    return batch


def collate_samples(samples: Sequence[Any], pin: bool = False) -> Any:
    """Pad a list of sample dicts into one batch dict; other samples: torch's default_collate.

    The batch: ``image (B,3,Hmax,Wmax)`` uint8 channels-last (content top-left, zero
    padding), ``sizes (B,2)`` int64 (height, width); every geometry group gets
    ``<group>.<col> (B,N,...)`` padded with zeros (labels with -1, as int64) and
    ``<group>.valid (B,N)``; polygons become ``points (B,N,V,2)`` + ``vertex_valid (B,N,V)``;
    ``masks.mask`` is ``(B,M,Hmax,Wmax)``. Integer fields (``index``, ``task_id``) become int64
    tensors; text lists become lists of lists, ``caption`` a list.

    Args:
        samples: Sample dicts (``is_shard_sample``), a ``ShardDataset`` batch
            (``__getitems__``), or any samples ``torch.utils.data.default_collate`` takes.
        pin: Page-lock the tensors (useful only when an accelerator is present).

    Returns:
        The padded batch dict, or torch's batch for other samples.

    Raises:
        ValueError: ``samples`` is empty.
        MixedSizes: Other samples whose tensors/arrays differ in shape (which element, which
            shapes, the fix).
    """
    if not samples:
        raise ValueError("collate_samples needs at least one sample")
    pin = pin and dev.pin_memory_supported(dev.best_device_type())
    if isinstance(samples, ColumnBatch):  # ShardDataset.__getitems__: one shot, same batch
        return collate_columns(samples.columns(), pin, samples.crop)
    plan = stream_crop.plan_of(samples[0])  # a stream's samples, to crop while read
    if plan is None and not is_shard_sample(samples[0]):
        torch_batch = _default_collate(samples if isinstance(samples, list) else list(samples))
        return pin_tree(torch_batch) if pin else torch_batch
    batch: Batch = {}
    keys = list(samples[0].keys())
    hw = (0, 0)
    if plan is not None:  # the stored sizes only: the crop writes the image buffer
        hs, ws = image_sizes([s["image"] for s in samples])
        batch["image"], batch["sizes"] = None, sizes_tensor(hs, ws)
        hw = (int(hs.max()), int(ws.max()))
    elif "image" in samples[0]:
        batch["image"], batch["sizes"] = images_tensor([s["image"] for s in samples], pin)
        hw = (batch["image"].shape[2], batch["image"].shape[3])
    groups: dict[str, list[str]] = {}
    for key in keys:
        if key in ("image", stream_crop.PLAN_KEY):
            continue
        group = key.split(".", 1)[0] if "." in key else None
        if group is not None and group in PADDED_BY_NAME:
            groups.setdefault(group, []).append(key)
            continue
        first = samples[0][key]
        if isinstance(first, (bool, int, np.integer)):
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.int64)
        elif isinstance(first, (float, np.floating)):
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.float64)
        elif isinstance(first, list):
            batch[key] = [list(s[key]) for s in samples]
        elif isinstance(first, np.ndarray) and all(
                isinstance(s[key], np.ndarray) and s[key].shape == first.shape for s in samples):
            batch[key] = torch.from_numpy(np.stack([s[key] for s in samples]))
        else:
            batch[key] = [s[key] for s in samples]
    for group, gkeys in groups.items():
        _group(samples, PADDED_BY_NAME[group], gkeys, pin, batch, hw)
    if plan is not None:
        return stream_crop.crop_batch(batch, [s["image"] for s in samples], plan, pin)
    return batch


def is_collate_samples(fn: Any) -> bool:
    """``fn`` is :func:`collate_samples` (or a ``functools.partial`` of it)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn is collate_samples
