"""Host batch buffers (collates and the kinds' collate hooks): shared memory in DataLoader
workers, pinned on request, big ones reused in the process (:func:`reused_empty`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from npu_data import device as dev
from npu_data.common.compat import STORAGE_USE_COUNT

TORCH_DTYPE = {
    np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64, np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
    np.dtype(np.bool_): torch.bool,
}


def empty_host(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """An uninitialised host tensor: shared memory in a worker, pinned when asked."""
    if pin:
        return dev.empty_pinned(shape, dtype, dev.best_device_type())
    if get_worker_info() is not None:
        numel = int(np.prod(shape)) if shape else 1
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        storage = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=dtype).set_(storage).view(shape)
    return torch.empty(shape, dtype=dtype)


# Batch buffers of at least _REUSE_FROM bytes are kept for reuse: malloc maps a block that big
# afresh each time (its adaptive threshold stops at 32 MiB) and every page faults in again —
# 12,289 faults for a 64 x 3 x 512 x 512 crop batch, half of all the process's faults.
_REUSE_FROM = 16 << 20
_CAN_REUSE = STORAGE_USE_COUNT is not None  # whether this torch tells that a buffer is free


def _owners(storage: torch.UntypedStorage) -> int:
    """How many owners ``storage`` has, its Python object included (``_CAN_REUSE`` only)."""
    assert STORAGE_USE_COUNT is not None
    return int(STORAGE_USE_COUNT(storage._cdata))
_KEEP = 6  # batches a loader has in flight: read ahead, prefetched, transformed, in use
_LOCK = threading.Lock()
_HELD: list[torch.UntypedStorage] = []


def reused_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 host tensor: for a big one, a buffer handed out before that
    nothing holds any more — no tensor, view or numpy array of it is alive, its storage's only
    reference is this pool's — else a new one (kept, up to the last ``_KEEP``)."""
    n = int(np.prod(shape)) if shape else 1
    if not _CAN_REUSE or n < _REUSE_FROM:
        return torch.empty(shape, dtype=torch.uint8)
    strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    with _LOCK:  # checked and handed out under the lock: two threads never share one
        storage = next((s for s in _HELD if s.nbytes() == n and _owners(s) == 1),
                       None)
        if storage is None:
            storage = torch.UntypedStorage(n)
            _HELD.append(storage)
            del _HELD[:-_KEEP]
        return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape, strides)


# Scratch buffers of varying size (the regions a batch's JPEGs are decoded into), pooled by
# process, not by thread: a loader's read-ahead thread is new every epoch, and a buffer kept
# per thread was mapped afresh each epoch (221 MB, 48,000 page faults per epoch at 1,600 x
# 1,200 -> 512).
_SCRATCH: list[torch.UntypedStorage] = []
_KEEP_SCRATCH = 2  # threads decoding at once: one read thread per loader, usually one loader


def reused_scratch(nbytes: int) -> torch.Tensor:
    """An uninitialised 1-D uint8 host tensor of at least ``nbytes``: a pooled buffer that
    nothing holds any more (as :func:`reused_empty`; grown by a quarter when the free ones are
    too small), else a new one."""
    if not _CAN_REUSE:
        return torch.empty(nbytes, dtype=torch.uint8)
    with _LOCK:
        free = [s for s in _SCRATCH if _owners(s) == 1]
        storage = next((s for s in free if s.nbytes() >= nbytes), None)
        if storage is None:
            if free:  # outgrown: replaced, not kept beside the bigger one
                _SCRATCH.remove(max(free, key=lambda s: s.nbytes()))
            storage = torch.UntypedStorage(nbytes + nbytes // 4)
            _SCRATCH.append(storage)
            del _SCRATCH[:-_KEEP_SCRATCH]
        return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))


def release_reused() -> None:
    """Drop the pools' buffers (those still in use live on with their tensors)."""
    with _LOCK:
        _HELD.clear()
        _SCRATCH.clear()


def zeros_host(shape: tuple[int, ...], dtype: torch.dtype, pin: bool,
               fill: float = 0) -> torch.Tensor:
    """``empty_host`` filled with ``fill``."""
    out = empty_host(shape, dtype, pin)
    out.fill_(fill)
    return out


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (float32 for any other)."""
    return TORCH_DTYPE.get(np.dtype(dtype), torch.float32)


def image_sizes(images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(heights, widths) int64 of the images."""
    b = len(images)
    hs = np.fromiter((im.shape[0] for im in images), dtype=np.int64, count=b)
    ws = np.fromiter((im.shape[1] for im in images), dtype=np.int64, count=b)
    return hs, ws


def sizes_tensor(hs: np.ndarray, ws: np.ndarray) -> torch.Tensor:
    """(B, 2) int64 (height, width)."""
    return (torch.from_numpy(np.stack([hs, ws], axis=1)) if len(hs)
            else torch.zeros(0, 2, dtype=torch.int64))


def copy_images(images: Sequence[np.ndarray], hs: np.ndarray, ws: np.ndarray,
                out: np.ndarray) -> None:
    """Each image at the top-left of ``out[i]`` (B, Hmax, Wmax, 3); only padding zeroed."""
    hmax, wmax = out.shape[1:3]
    for i, im in enumerate(images):
        h, w = int(hs[i]), int(ws[i])
        out[i, :h, :w] = im
        if h < hmax:
            out[i, h:] = 0
        if w < wmax:
            out[i, :h, w:] = 0


def batch_buffer(batch: dict[str, Any], shape: tuple[int, ...], pin: bool = False
                 ) -> torch.Tensor:
    """An image buffer of ``shape`` for ``batch``; in a worker (shared memory) or with
    ``pin`` the batch's other tensors move into the same storage, after the image (empty ones
    too): one storage to send to the main process or to page-lock instead of one per tensor.
    Elsewhere a pooled buffer (:func:`reused_empty`)."""
    image_bytes = int(np.prod(shape))
    if not pin and get_worker_info() is None:
        return reused_empty(shape)
    keys = [k for k, v in batch.items() if isinstance(v, torch.Tensor)]
    starts, total = [], -(-image_bytes // 64) * 64
    for k in keys:
        starts.append(total)
        total += -(-batch[k].numel() * batch[k].element_size() // 64) * 64
    storage = empty_host((total,), torch.uint8, pin).untyped_storage()
    for k, start in zip(keys, starts, strict=True):
        t = batch[k]
        stride = t.stride() if t.is_contiguous() else _contiguous_strides(t.shape)
        view = torch.empty(0, dtype=t.dtype).set_(storage, start // t.element_size(), t.shape,
                                                  stride)
        view.copy_(t)
        batch[k] = view
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape, _contiguous_strides(shape))


def image_buffer(batch: dict[str, Any], shape: tuple[int, ...], pin: bool = False
                 ) -> torch.Tensor:
    """An image buffer of ``shape`` alone (``batch`` untouched): :func:`empty_host`."""
    return empty_host(shape, torch.uint8, pin)


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def nbytes(values: Iterable[Any]) -> int:
    """Bytes of the tensors among ``values`` and inside their lists, tuples and dicts (one
    loop, no call per value: a batch's 80-odd keys are counted once, where it is made)."""
    total = 0
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, Mapping):
            stack.extend(v.values())
    return total
