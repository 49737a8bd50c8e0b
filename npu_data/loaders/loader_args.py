"""The DataLoader's own arguments checked (one line naming the argument and the fix), its
default transform, the worker setup it hands torch, and where a batch's image is."""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable
from typing import Any

import torch

from npu_data.common import compiled
from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.loaders.bucket_sampler import bind_buckets
from npu_data.loaders.caption_check import bind_empty_prompt, check_captions

READ_AHEAD = 2  # batches a DataLoader's read thread works ahead of the transform
# The importing thread's torch thread count, fixed now: a thread that first asks after torch's
# pin-memory thread ran (it calls set_num_threads(1)) would get 1. The read thread uses it.
torch.get_num_threads()
_IMPORTED_IN = os.getpid()  # another pid in a worker: forked (a spawned one imports anew)


def check_extras(device_prefetch: int, image_key: Any, read_crop: Any, decode: Any,
                 read_thread: Any) -> None:
    """The loader's extra arguments are of their type and in range."""
    if device_prefetch < 0:
        raise UserValueError(f"device_prefetch={device_prefetch}: use 0 (no prefetch) or more")
    if image_key is not None and (isinstance(image_key, bool)
                                  or not isinstance(image_key, int | str)):
        raise UserTypeError(f"DataLoader: image_key={image_key!r} must be a tuple position (int) "
                            "or a dict key (str)")
    for name, value in (("read_crop", read_crop), ("read_thread", read_thread)):
        if value is not None and not isinstance(value, bool):
            raise UserTypeError(f"DataLoader: {name}={value!r} must be True, False or None")
    if decode not in ("exact", "fast"):
        raise UserValueError(f"DataLoader: decode={decode!r} must be 'exact' (the pixels of a "
                             "full decode) or 'fast' (DCT-scaled JPEG decoding, not exact)")


def loader_transform(transform: Any, dataset: Any, batch_sampler: Any,
                     batch_size: int | None) -> Any:
    """The loader's device transform: ``transform``, else the dataset's for this package's
    datasets (torchvision's ``.transform`` is per sample); given the user's ``batch_sampler``
    buckets (``bucket_sampler.bind_buckets``) and checked against the dataset's captions."""
    if transform is None and ours(dataset):
        transform = getattr(dataset, "transform", None)
    bind_buckets(transform, batch_sampler, batch_size)
    bind_classes(transform, dataset)
    check_captions(dataset, transform)
    bind_empty_prompt(dataset, transform)
    return transform


def bind_classes(transform: Any, dataset: Any) -> None:
    """Give the dataset's labels (``{control: names}``) to every stage of ``transform`` that
    takes them (MixUp / CutMix: their class count when ``num_classes`` is None)."""
    from npu_data.loaders.bucket_sampler import stages_of

    labels = getattr(dataset, "labels", None) if ours(dataset) else None
    if not isinstance(labels, dict):
        return
    for t in stages_of(transform):
        take = getattr(t, "take_classes", None)
        if callable(take):
            take(labels)


def worker_init(user_init: Callable[[int], None] | None,
                threads: int | None = None) -> Callable[[int], None]:
    """The ``worker_init_fn`` torch gets: the loader's setup (``threads``: the worker's kernel
    threads, ``loaders.placement``; None: torch's 1), then ``user_init`` (a loader
    rebuilt from this one's attributes passes this back: not wrapped twice)."""
    if isinstance(user_init, functools.partial) and user_init.func is _worker_init:
        user_init = user_init.args[0]
    return functools.partial(_worker_init, user_init, threads=threads)


def _worker_init(user_init: Callable[[int], None] | None, worker_id: int,
                 threads: int | None = None) -> None:
    """Freeze what the worker inherited: the garbage collector never scans (nor dirties,
    copy-on-write) those objects again, so batches cost less and worker memory stays flat.
    Set its threads: the compiled kernels', and torch's only in a spawned worker — in a forked
    one torch's OpenMP team is the parent's, without its threads, and a parallel torch op
    would hang (libgomp)."""
    gc.freeze()
    if threads is not None:
        compiled.set_threads(threads)
        if os.getpid() == _IMPORTED_IN:
            torch.set_num_threads(threads)
    if user_init is not None:
        user_init(worker_id)


def ours(dataset: Any) -> bool:
    """A dataset of this package (or a subclass): its ``transform`` is a device batch one."""
    return any(c.__module__.startswith("npu_data.") for c in type(dataset).__mro__)


def image_position(batch: list[Any] | tuple[Any, ...], key: int | str | None = None) -> int:
    """Index of the image tensor of a tuple/list batch: ``key`` when it is a position, else
    the first uint8 (B, C, H, W) tensor."""
    if isinstance(key, int):
        v = batch[key] if -len(batch) <= key < len(batch) else None
        if not (isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.ndim == 4):
            kind = (f"{type(v).__name__}{tuple(v.shape) if isinstance(v, torch.Tensor) else ''}"
                    if v is not None else f"absent (the batch has {len(batch)} elements)")
            raise UserError(f"DataLoader: image_key={key}: batch element {key} is {kind}, not "
                            "a uint8 (B, C, H, W) image tensor")
        return key
    for i, v in enumerate(batch):
        if isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.ndim == 4:
            if v.shape[1] not in (1, 3, 4) and v.shape[3] in (1, 3, 4):
                raise UserError(
                    f"DataLoader transform: batch element {i} looks channels-last "
                    f"{tuple(v.shape)} — return (C, H, W) images or permute in collate_fn")
            return i
    kinds = ", ".join(f"{type(v).__name__}{tuple(v.shape) if isinstance(v, torch.Tensor) else ''}"
                      for v in batch)
    raise UserError(f"DataLoader transform: the {type(batch).__name__} batch ({kinds}) has no "
                    "uint8 (B, C, H, W) image tensor — return one from the dataset/collate_fn "
                    "or drop transform=")
