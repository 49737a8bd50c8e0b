"""collate_columns: a ShardDataset batch read column-wise (BatchColumns) → the batch dict.

The same batch, key for key, as ``collate_samples`` of the batch's ``ds[i]`` dicts, built with
one vectorised scatter per column. In a worker (or with ``pin``) the image and every other
tensor share one buffer: one storage to send to the main process or to page-lock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from npu_data.buffers import (
    copy_images,
    empty_host,
    image_sizes,
    reused_empty,
    sizes_tensor,
    torch_dtype,
)
from npu_data.common.batch import Batch, BatchColumns, CropPlan
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import PADDED_BY_NAME
from npu_data.loaders import crop_read


def collate_columns(cols: BatchColumns, pin: bool, crop: CropPlan | None = None) -> Batch:
    """``collate_samples`` of the batch's sample dicts, built from its columns.

    With a ``crop`` plan the batch is already through the pipeline's leading crop
    (``crop_read.crop_batch``): each image is resized from its stored pixels (a view of the
    memory map for raw shards) straight into the batch buffer, the geometry keys follow the
    crop, ``sizes`` is the crop's output size — the same values as collating and then
    running the crop."""
    b = len(cols)
    hs, ws = image_sizes(cols.images)
    hw = (int(hs.max()), int(ws.max())) if b else (0, 0)
    batch: Batch = {"image": None, "sizes": sizes_tensor(hs, ws)}
    groups: dict[str, list[str]] = {}
    for key in cols.keys:
        if key == "image":
            continue
        group = key.split(".", 1)[0] if "." in key else None
        if group is not None and group in PADDED_BY_NAME:
            groups.setdefault(group, []).append(key)
        elif key in cols.ints:
            batch[key] = torch.from_numpy(cols.ints[key].astype(np.int64))
        elif key in cols.strings:
            batch[key] = list(cols.strings[key])
        elif key in cols.texts:
            batch[key] = cols.texts[key]  # fresh lists, one per sample
        else:  # row columns of texts/taxonomy/relations: stacked when every count matches
            counts = cols.counts[str(group)]
            rows = cols.rows[key]
            if b and bool((counts == counts[0]).all()):
                stacked = np.array(rows.reshape(b, int(counts[0]), *rows.shape[1:]))
                batch[key] = torch.from_numpy(stacked)  # a copy, like np.stack
            else:
                batch[key] = np.split(rows, np.cumsum(counts)[:-1])
    for group, gkeys in groups.items():
        _group_columns(cols, PADDED_BY_NAME[group], gkeys, batch, hw)
    if crop is not None:
        return crop_read.crop_batch(batch, cols.images, crop,
                                    lambda out, shape: _pack(out, pin, shape))
    image = _pack(batch, pin, (b, *hw, 3))
    copy_images(cols.images, hs, ws, image.numpy())
    batch["image"] = image.permute(0, 3, 1, 2)
    return batch


def _pack(batch: Batch, pin: bool, image_shape: tuple[int, ...]) -> torch.Tensor:
    """The (B, H, W, 3) image buffer; in a worker (shared memory) or with ``pin`` the
    batch's other tensors move into the same buffer, after the image (empty ones too): one
    storage to send to the main process or to page-lock instead of one per tensor."""
    image_bytes = int(np.prod(image_shape))
    if not pin and get_worker_info() is None:
        return reused_empty(image_shape)
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
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, image_shape,
                                                  _contiguous_strides(image_shape))


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _slots(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample, slot) of every row of a group whose samples hold ``counts`` rows."""
    sample = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return sample, np.arange(len(sample)) - np.repeat(starts, counts)


def _group_columns(cols: BatchColumns, kind: Kind, keys: list[str], batch: Batch,
                   hw: tuple[int, int]) -> None:
    b = len(cols)
    group = kind.name
    counts = cols.counts[group]
    nmax = int(counts.max()) if b else 0
    batch[f"{group}.valid"] = torch.from_numpy(np.arange(nmax)[None, :] < counts[:, None])
    own = kind.own_keys()
    if nmax == 0:
        for key in keys:
            if key in own:
                continue
            if key in cols.texts:
                batch[key] = [[] for _ in range(b)]
            else:
                rows = cols.rows[key]
                batch[key] = torch.zeros((b, 0, *rows.shape[1:]),
                                         dtype=_pad_dtype(rows, key.split(".", 1)[1]))
        kind.pad_empty(b, hw, batch)
        return
    sample, slot = _slots(counts)
    sizes = [(int(im.shape[0]), int(im.shape[1])) for im in cols.images]
    kind.pad_columns(cols.nested, sample, slot, (b, nmax), sizes, batch)
    for key in keys:
        if key in own:
            continue
        name = key.split(".", 1)[1]
        if key in cols.texts:
            batch[key] = cols.texts[key]  # fresh lists, one per sample
        else:
            rows = cols.rows[key]
            out = torch.full((b, nmax, *rows.shape[1:]), -1 if name == "label" else 0,
                             dtype=_pad_dtype(rows, name))
            out.numpy()[sample, slot] = rows
            batch[key] = out


def _pad_dtype(rows: np.ndarray, name: str) -> torch.dtype:
    dtype = torch_dtype(rows.dtype)
    if name == "label" and dtype in (torch.int8, torch.int16, torch.int32):
        return torch.int64  # labels: long, -1 pads (as _pad_rows)
    return dtype
