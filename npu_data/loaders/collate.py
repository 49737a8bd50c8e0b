"""collate_samples: sample dicts → one padded batch dict (docs/architecture.md).

Images are copied once, straight into a ``(B, Hmax, Wmax, 3)`` uint8 buffer that is returned
as its ``(B, 3, Hmax, Wmax)`` channels-last view; only the padding is zeroed. Inside a
DataLoader worker the buffers live in shared memory (no copy when the batch is sent to the
main process); with ``pin=True`` (main process) they are page-locked for the accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from npu_data import device as dev
from npu_data.shards.batch_read import BatchColumns, SampleBatch

Sample = dict[str, Any]
Batch = dict[str, Any]

# group -> the key whose first dimension counts the group's rows in a sample
_ROW_KEY = {
    "boxes": "xyxy", "keypoints": "xy", "ellipses": "params", "masks": "mask",
    "choices": "label", "scalars": "value", "polygons": "label",
}
_TORCH_DTYPE = {
    np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64, np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
    np.dtype(np.bool_): torch.bool,
}


def _empty(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """An uninitialised host tensor: shared memory in a worker, pinned when asked."""
    if pin:
        return dev.empty_pinned(shape, dtype, dev.best_device_type())
    if get_worker_info() is not None:
        numel = int(np.prod(shape)) if shape else 1
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        storage = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=dtype).set_(storage).view(shape)
    return torch.empty(shape, dtype=dtype)


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, pin: bool, fill: float = 0) -> torch.Tensor:
    out = _empty(shape, dtype, pin)
    out.fill_(fill)
    return out


def _tdtype(dtype: np.dtype) -> torch.dtype:
    return _TORCH_DTYPE.get(np.dtype(dtype), torch.float32)


def _images(images: Sequence[np.ndarray], pin: bool) -> tuple[torch.Tensor, torch.Tensor]:
    hs, ws = _image_sizes(images)
    hmax, wmax = (int(hs.max()), int(ws.max())) if len(images) else (0, 0)
    buf = _empty((len(images), hmax, wmax, 3), torch.uint8, pin)
    _copy_images(images, hs, ws, buf.numpy())
    return buf.permute(0, 3, 1, 2), _sizes(hs, ws)


def _image_sizes(images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    b = len(images)
    hs = np.fromiter((im.shape[0] for im in images), dtype=np.int64, count=b)
    ws = np.fromiter((im.shape[1] for im in images), dtype=np.int64, count=b)
    return hs, ws


def _sizes(hs: np.ndarray, ws: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(np.stack([hs, ws], axis=1)) if len(hs)
            else torch.zeros(0, 2, dtype=torch.int64))


def _copy_images(images: Sequence[np.ndarray], hs: np.ndarray, ws: np.ndarray,
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


def _pad_rows(arrays: Sequence[np.ndarray | None], counts: np.ndarray, nmax: int, pin: bool,
              fill: float) -> torch.Tensor:
    first = next((a for a in arrays if a is not None), None)
    tail = tuple(first.shape[1:]) if first is not None else ()
    dtype = _tdtype(first.dtype) if first is not None else torch.float32
    if dtype in (torch.int8, torch.int16, torch.int32) and fill < 0:
        dtype = torch.int64  # labels: long, the dtype losses expect; -1 pads
    out = _zeros((len(arrays), nmax, *tail), dtype, pin, fill)
    view = out.numpy()
    for i, a in enumerate(arrays):
        if a is not None and counts[i]:
            view[i, :counts[i]] = a
    return out


def _group(samples: Sequence[Sample], group: str, keys: list[str], pin: bool, batch: Batch,
           hw: tuple[int, int]) -> None:
    b = len(samples)
    row = f"{group}.{_ROW_KEY[group]}"
    counts = np.fromiter((len(s[row]) if row in s else 0 for s in samples), np.int64, count=b)
    nmax = int(counts.max()) if b else 0
    valid = torch.from_numpy(np.arange(nmax)[None, :] < counts[:, None])
    batch[f"{group}.valid"] = valid
    if nmax == 0:  # fast path: a group no sample of this batch uses
        _empty_group(samples[0], group, keys, b, hw, batch)
        return
    if group == "polygons":
        _polygons(samples, counts, nmax, pin, batch)
    for key in keys:
        name = key.split(".", 1)[1]
        if group == "polygons" and name in ("points", "point_offsets"):
            continue
        vals = [s.get(key) for s in samples]
        if any(isinstance(v, list) for v in vals) or not all(
                isinstance(v, np.ndarray) or v is None for v in vals):
            batch[key] = [list(v) if v is not None else [] for v in vals]
            continue
        if any(v is not None and len(v) != c for v, c in zip(vals, counts, strict=True)):
            batch[key] = [torch.from_numpy(np.ascontiguousarray(v)) if v is not None else None
                          for v in vals]
            continue
        if key == "masks.mask":
            batch[key] = _masks(vals, counts, nmax, hw, pin)
            continue
        fill = -1.0 if name == "label" else 0.0
        batch[key] = _pad_rows(vals, counts, nmax, pin, fill)


def _empty_group(first: Sample, group: str, keys: list[str], b: int, hw: tuple[int, int],
                 batch: Batch) -> None:
    for key in keys:
        name = key.split(".", 1)[1]
        v = first[key]
        if group == "polygons" and name in ("points", "point_offsets"):
            continue
        if key == "masks.mask":
            batch[key] = torch.zeros((b, 0, hw[0], hw[1]), dtype=torch.uint8)
        elif isinstance(v, np.ndarray):
            dtype = _tdtype(v.dtype)
            if name == "label" and dtype in (torch.int8, torch.int16, torch.int32):
                dtype = torch.int64
            batch[key] = torch.zeros((b, 0, *v.shape[1:]), dtype=dtype)
        else:
            batch[key] = [[] for _ in range(b)]
    if group == "polygons":
        # V = 1, never 0: reductions over the vertex axis stay defined downstream
        batch["polygons.points"] = torch.zeros((b, 0, 1, 2), dtype=torch.float32)
        batch["polygons.vertex_valid"] = torch.zeros((b, 0, 1), dtype=torch.bool)


def _polygons(samples: Sequence[Sample], counts: np.ndarray, nmax: int, pin: bool,
              batch: Batch) -> None:
    b = len(samples)
    offs = [np.asarray(s.get("polygons.point_offsets", np.zeros(1, np.int64))) for s in samples]
    vmax = max((int(np.diff(o).max()) for o in offs if len(o) > 1), default=0)
    points = _zeros((b, nmax, vmax, 2), torch.float32, pin)
    vvalid = np.zeros((b, nmax, vmax), dtype=bool)
    pview = points.numpy()
    for i, s in enumerate(samples):
        o = offs[i]
        n = len(o) - 1
        if n <= 0:
            continue
        lens = np.diff(o)
        pts = np.asarray(s["polygons.points"], dtype=np.float32)
        poly = np.repeat(np.arange(n), lens)
        vert = np.arange(len(pts)) - np.repeat(o[:-1], lens)
        pview[i, poly, vert] = pts
        vvalid[i, poly, vert] = True
    batch["polygons.points"] = points
    batch["polygons.vertex_valid"] = torch.from_numpy(vvalid)


def _masks(vals: Sequence[np.ndarray | None], counts: np.ndarray, nmax: int,
           hw: tuple[int, int], pin: bool) -> torch.Tensor:
    out = _zeros((len(vals), nmax, hw[0], hw[1]), torch.uint8, pin)
    view = out.numpy()
    for i, m in enumerate(vals):
        if m is not None and counts[i]:
            view[i, :counts[i], :m.shape[1], :m.shape[2]] = m
    return out


def collate_samples(samples: Sequence[Sample], pin: bool = False) -> Batch:
    """Pad a list of sample dicts into one batch dict.

    ``image (B,3,Hmax,Wmax)`` uint8 channels-last (content top-left, zero padding),
    ``sizes (B,2)`` int64 (height, width); every geometry group gets ``<group>.<col>
    (B,N,...)`` padded with zeros (labels with -1, as int64) and ``<group>.valid (B,N)``;
    polygons become ``points (B,N,V,2)`` + ``vertex_valid (B,N,V)``; ``masks.mask`` is
    ``(B,M,Hmax,Wmax)``. Integer fields (``index``, ``task_id``) become int64 tensors;
    text lists become lists of lists, ``caption`` a list. ``pin=True`` page-locks the
    tensors (useful only when an accelerator is present).
    """
    if not samples:
        raise ValueError("collate_samples needs at least one sample")
    pin = pin and dev.pin_memory_supported(dev.best_device_type())
    if isinstance(samples, SampleBatch):  # ShardDataset.__getitems__: one shot, same batch
        return _collate_columns(samples.columns(), pin)
    batch: Batch = {}
    keys = list(samples[0].keys())
    hw = (0, 0)
    if "image" in samples[0]:
        batch["image"], batch["sizes"] = _images([s["image"] for s in samples], pin)
        hw = (batch["image"].shape[2], batch["image"].shape[3])
    groups: dict[str, list[str]] = {}
    for key in keys:
        if key in ("image",):
            continue
        group = key.split(".", 1)[0] if "." in key else None
        if group is not None and group in _ROW_KEY:
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
        _group(samples, group, gkeys, pin, batch, hw)
    return batch


# --- the same batch from BatchColumns (ShardDataset batches), vectorised ------------------
def _collate_columns(cols: BatchColumns, pin: bool) -> Batch:
    """``collate_samples`` of the batch's sample dicts, built from its columns."""
    b = len(cols)
    hs, ws = _image_sizes(cols.images)
    hw = (int(hs.max()), int(ws.max())) if b else (0, 0)
    batch: Batch = {"image": None, "sizes": _sizes(hs, ws)}
    groups: dict[str, list[str]] = {}
    for key in cols.keys:
        if key == "image":
            continue
        group = key.split(".", 1)[0] if "." in key else None
        if group is not None and group in _ROW_KEY:
            groups.setdefault(group, []).append(key)
        elif key in cols.ints:
            batch[key] = torch.from_numpy(cols.ints[key].astype(np.int64))
        elif key in cols.strings:
            batch[key] = list(cols.strings[key])
        elif key in cols.texts:
            batch[key] = [list(t) for t in cols.texts[key]]
        else:  # row columns of texts/taxonomy/relations: stacked when every count matches
            counts = cols.counts[str(group)]
            rows = cols.rows[key]
            if b and bool((counts == counts[0]).all()):
                stacked = np.array(rows.reshape(b, int(counts[0]), *rows.shape[1:]))
                batch[key] = torch.from_numpy(stacked)  # a copy, like np.stack
            else:
                batch[key] = np.split(rows, np.cumsum(counts)[:-1])
    for group, gkeys in groups.items():
        _group_columns(cols, group, gkeys, batch, hw)
    image = _pack(batch, pin, (b, *hw, 3))
    _copy_images(cols.images, hs, ws, image.numpy())
    batch["image"] = image.permute(0, 3, 1, 2)
    return batch


def _pack(batch: Batch, pin: bool, image_shape: tuple[int, ...]) -> torch.Tensor:
    """The (B, H, W, 3) image buffer; in a worker (shared memory) or with ``pin`` the
    batch's other non-empty tensors move into the same buffer, after the image: one storage
    to send to the main process or to page-lock instead of one per tensor."""
    image_bytes = int(np.prod(image_shape))
    if not pin and get_worker_info() is None:
        return torch.empty(image_shape, dtype=torch.uint8)
    keys = [k for k, v in batch.items() if isinstance(v, torch.Tensor) and v.numel()]
    starts, total = [], -(-image_bytes // 64) * 64
    for k in keys:
        starts.append(total)
        total += -(-batch[k].numel() * batch[k].element_size() // 64) * 64
    storage = _empty((total,), torch.uint8, pin).untyped_storage()
    for k, start in zip(keys, starts, strict=True):
        t = batch[k]
        nbytes = t.numel() * t.element_size()
        view = torch.empty(0, dtype=torch.uint8).set_(storage, start, (nbytes,), (1,))
        view = view.view(t.dtype).view(t.shape)
        view.copy_(t)
        batch[k] = view
    flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (image_bytes,), (1,))
    return flat.view(image_shape)


def _slots(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample, slot) of every row of a group whose samples hold ``counts`` rows."""
    sample = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return sample, np.arange(len(sample)) - np.repeat(starts, counts)


def _group_columns(cols: BatchColumns, group: str, keys: list[str], batch: Batch,
                   hw: tuple[int, int]) -> None:
    b = len(cols)
    counts = cols.counts[group]
    nmax = int(counts.max()) if b else 0
    batch[f"{group}.valid"] = torch.from_numpy(np.arange(nmax)[None, :] < counts[:, None])
    if nmax == 0:
        for key in keys:
            name = key.split(".", 1)[1]
            if group == "polygons" and name in ("points", "point_offsets"):
                continue
            if key == "masks.mask":
                batch[key] = torch.zeros((b, 0, hw[0], hw[1]), dtype=torch.uint8)
            elif key in cols.texts:
                batch[key] = [[] for _ in range(b)]
            else:
                rows = cols.rows[key]
                batch[key] = torch.zeros((b, 0, *rows.shape[1:]), dtype=_pad_dtype(rows, name))
        if group == "polygons":
            batch["polygons.points"] = torch.zeros((b, 0, 1, 2), dtype=torch.float32)
            batch["polygons.vertex_valid"] = torch.zeros((b, 0, 1), dtype=torch.bool)
        return
    sample, slot = _slots(counts)
    if group == "polygons":
        _polygon_columns(cols, sample, slot, (b, nmax), batch)
    for key in keys:
        name = key.split(".", 1)[1]
        if group == "polygons" and name in ("points", "point_offsets"):
            continue
        if key in cols.texts:
            batch[key] = [list(t) for t in cols.texts[key]]
        elif key == "masks.mask":
            batch[key] = _mask_columns(cols, sample, slot, (b, nmax, *hw))
        else:
            rows = cols.rows[key]
            out = torch.full((b, nmax, *rows.shape[1:]), -1 if name == "label" else 0,
                             dtype=_pad_dtype(rows, name))
            out.numpy()[sample, slot] = rows
            batch[key] = out


def _pad_dtype(rows: np.ndarray, name: str) -> torch.dtype:
    dtype = _tdtype(rows.dtype)
    if name == "label" and dtype in (torch.int8, torch.int16, torch.int32):
        return torch.int64  # labels: long, -1 pads (as _pad_rows)
    return dtype


def _polygon_columns(cols: BatchColumns, sample: np.ndarray, slot: np.ndarray,
                     bn: tuple[int, int], batch: Batch) -> None:
    lens = cols.vertex_counts
    vmax = int(lens.max()) if len(lens) else 0
    points = torch.zeros((*bn, vmax, 2), dtype=torch.float32)
    vvalid = np.zeros((*bn, vmax), dtype=bool)
    poly = np.repeat(np.arange(len(lens)), lens)
    vert = np.arange(len(poly)) - np.repeat(np.cumsum(lens) - lens, lens)
    pts = np.asarray(cols.rows["polygons.points"], dtype=np.float32)
    points.numpy()[sample[poly], slot[poly], vert] = pts
    vvalid[sample[poly], slot[poly], vert] = True
    batch["polygons.points"] = points
    batch["polygons.vertex_valid"] = torch.from_numpy(vvalid)


def _mask_columns(cols: BatchColumns, sample: np.ndarray, slot: np.ndarray,
                  shape: tuple[int, int, int, int]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=torch.uint8)
    view = out.numpy()
    ends = np.cumsum(cols.mask_bit_counts).tolist()
    start = 0
    for r, (i, t) in enumerate(zip(sample.tolist(), slot.tolist(), strict=True)):
        h, w = cols.images[i].shape[:2]
        bits = np.unpackbits(cols.mask_bits[start:ends[r]], count=h * w)
        view[i, t, :h, :w] = bits.reshape(h, w)
        start = ends[r]
    return out
