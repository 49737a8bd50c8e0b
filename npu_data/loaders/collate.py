"""The samples the loaders' assembler (``loaders.assemble``) leaves to torch: which samples
are in our layout (``is_shard_sample``), and torch's ``default_collate`` for any other sample
structure (tuples, lists, named tuples, tensors, numbers, plain dicts, nested), so the batch
is exactly torch's; when it fails because the samples' tensors/arrays differ in shape,
``MixedSizes`` says which element, which shapes and the fix in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from npu_data.batch import EncodedImage, pin_tree
from npu_data.errors import UserError
from npu_data.kinds.registry import PADDED_BY_NAME

Path = tuple[int | str, ...]
_MIXED_FIX = ("resize them to one size in the dataset, store them as shards (padded batches "
              "with 'sizes'), or pass a collate_fn")
_LATENTS_FIX = ("a latents store holds one size per bucket: batch it with "
                "npu_data.loaders.BucketBatchSampler (batch_sampler=...), which gives batches "
                "of one bucket")


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
    latents = bool(path) and path[0] in ("latents", "latents_flipped")
    fix = _LATENTS_FIX if latents else _MIXED_FIX
    return MixedSizes(
        f"collate: {subject} different shapes within one batch: "
        f"{first} at batch position 0 and {other} at batch position {j} — {fix}")


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


def is_shard_sample(sample: Any) -> bool:
    """True for our sample layout (``ShardDataset``'s dicts): a dict whose ``image`` is an
    HWC uint8 ndarray with 3 channels (or an ``EncodedImage``), or with ``<group>.<column>``
    geometry keys."""
    if not isinstance(sample, Mapping):
        return False
    image = sample.get("image")
    if isinstance(image, EncodedImage):  # a JPEG left encoded for the crop at read
        return True
    if isinstance(image, np.ndarray):
        return image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    if image is not None:
        return False
    return any(isinstance(k, str) and k.split(".", 1)[0] in PADDED_BY_NAME and "." in k
               for k in sample)




def default_collate_samples(samples: Sequence[Any], pin: bool = False) -> Any:
    """Samples that are not in our layout: torch's ``default_collate`` (page-locked with
    ``pin``); mixed shapes raise ``MixedSizes``."""
    batch = _default_collate(samples if isinstance(samples, list) else list(samples))
    return pin_tree(batch) if pin else batch
