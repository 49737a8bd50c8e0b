"""The one assembler of the loaders: a batch's samples -> one ``HostBatch`` (docs/architecture.md).

A ``ShardDataset`` batch (a ``HostBatch`` read for a ``BatchRequest``) is built from its
columns with one vectorised scatter per column; a list of sample dicts (a stream's, or any
dataset's in our layout, ``is_shard_sample``) is made columns first (``_columns_of``; what
columns cannot carry is batched beside them, ``HostBatch.batched`` and ``padded``), then
built by the same assembler (``_assemble``): one set of grouping, padding and meta rules.
Images are copied once, straight into a ``(B, Hmax, Wmax, 3)`` uint8 buffer that is
returned as its ``(B, 3, Hmax, Wmax)`` channels-last view; only the padding is zeroed. Inside
a DataLoader worker the buffers live in shared memory (a column batch's other tensors share
the image's: one storage to send to the main process); with ``pin=True`` (main process) they
are page-locked for the accelerator.

When the request carries a leading crop (``request.crop``: a ``CropPlan``), the batch is
assembled at its stored sizes and handed to the reader (``readers.read_crop.read``): each
image's crop box resized straight into the batch buffer, the geometry moved with it, a JPEG
decoded only in its box or in the pixels its window reads — the values of collating the full
images and cropping after. A stream's batch draws its request here, where its sample ids are
known (``request.stream_request``).

The ``HostBatch`` says what the batch is — images, sizes, stored sizes, the other keys
(geometry by kind, meta), the request's parameters and whether the leading crop is applied —
and the DataLoader hands its batch dict (:meth:`HostBatch.as_dict`) on. Any other sample
structure goes to torch's ``default_collate`` (``loaders.collate``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from npu_data import device as dev
from npu_data.batch import Batch, BatchRequest, EncodedImage, HostBatch
from npu_data.buffers import (
    batch_buffer,
    copy_images,
    image_buffer,
    image_sizes,
    nbytes,
    sizes_tensor,
    torch_dtype,
    zeros_host,
)
from npu_data.errors import UserError
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import PADDED_BY_NAME
from npu_data.loaders.collate import default_collate_samples, is_shard_sample
from npu_data.loaders.placement import WorkerPipeline
from npu_data.loaders.request import (
    ASSEMBLERS,
    CropState,
    PassDraw,
    is_collate_samples,
    stream_request,
)
from npu_data.readers import read_crop
from npu_data.transforms.pipeline import Pipeline

__all__ = ["HostBatch", "collate_host", "collate_samples", "host_request", "is_collate_samples"]


def collate_samples(samples: Sequence[Any], pin: bool = False) -> Any:
    """Pad a list of sample dicts into one batch dict; other samples: torch's default_collate.

    The batch: ``image (B,3,Hmax,Wmax)`` uint8 channels-last (content top-left, zero
    padding), ``sizes (B,2)`` int64 (height, width); every geometry group gets
    ``<group>.<col> (B,N,...)`` padded with zeros (labels with -1, as int64) and
    ``<group>.valid (B,N)``; polygons become ``points (B,N,V,2)`` + ``vertex_valid (B,N,V)``;
    ``masks.mask`` is ``(B,M,Hmax,Wmax)``. Integer fields (``index``, ``task_id``) become int64
    tensors; text lists become lists of lists, ``caption`` a list. A ``ShardDataset`` batch
    read for a request with a crop comes back cropped (module doc).

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
    out = collate_host(samples, pin)
    return out.as_dict() if isinstance(out, HostBatch) else out


def collate_host(samples: Sequence[Any], pin: bool = False, stream: CropState | None = None,
                 pipeline: WorkerPipeline | None = None) -> Any:
    """The DataLoader's collate: :class:`HostBatch` for our samples (``stream``: the crop
    state of the stream they come from), torch's batch for any other. ``pipeline``: run the
    keyed pipeline on a batch whose request was drawn for it (``loaders.placement``)."""
    if not samples:
        raise ValueError("collate_samples needs at least one sample")
    pin = pin and dev.pin_memory_supported(dev.best_device_type())
    if isinstance(samples, HostBatch):  # ShardDataset.__getitems__: one shot
        host = _assemble(samples.columns(), pin, samples.request, batch_buffer)
        if pipeline is None or not pipeline.runs(host.request):
            return host
        assert host.request is not None
        out = pipeline.run(host.as_dict(), host.request, host.cropped)
        return dataclasses.replace(host, image=None, sizes=None, fields=out, applied=True,
                                   nbytes=nbytes(out.values()))
    if not is_shard_sample(samples[0]):
        return default_collate_samples(samples, pin)
    draw = stream.plan() if stream is not None else None
    return _assemble(_columns_of(samples, pin, draw is None), pin, None, image_buffer, draw)


ASSEMBLERS.update({collate_samples, collate_host})


def _host(batch: Batch, stored: np.ndarray | None, request: BatchRequest | None = None,
          cropped: bool = False) -> HostBatch:
    """The ``HostBatch`` of an assembled batch dict, its bytes counted here."""
    return HostBatch.of(batch, stored, request, cropped, nbytes(batch.values()))


def label_dtype(dtype: torch.dtype, name: str) -> torch.dtype:
    """The batch dtype of a padded column: labels are int64 (the dtype losses expect; -1
    pads), anything else keeps its dtype."""
    if name == "label" and dtype in (torch.int8, torch.int16, torch.int32):
        return torch.int64
    return dtype


def _group_of(key: str) -> str | None:
    """The padded kind a key belongs to (``<kind>.<column>``), None for meta."""
    group = key.split(".", 1)[0] if "." in key else None
    return group if group is not None and group in PADDED_BY_NAME else None


# --- the one assembler: columns -> batch ----------------------------------------------------
def _assemble(cols: HostBatch, pin: bool, request: BatchRequest | None,
              buffer: Callable[..., torch.Tensor], draw: PassDraw | None = None) -> HostBatch:
    """The batch of a batch's columns (a ``ShardDataset`` read, or sample dicts through
    :func:`_columns_of`): images copied once into ``buffer(batch, (B, Hmax, Wmax, 3), pin)``
    (``batch_buffer`` for a shard read: one storage; ``image_buffer`` for sample dicts),
    meta key by key, every geometry group padded. With the request's crop each image is
    resized from its stored pixels (a view of the memory map for raw shards, the decoded box
    of a JPEG) straight into the batch buffer and the geometry follows the crop (the reader,
    ``readers.read_crop.read``); ``draw``
    (a stream's armed pass): the request is drawn here, from the stored sizes."""
    b = len(cols)
    batch: Batch = {}
    hw, stored = (0, 0), None
    if "image" in cols.keys:
        hs, ws = image_sizes(cols.images)
        hw = (int(hs.max()), int(ws.max())) if b else (0, 0)
        batch["image"], batch["sizes"] = None, sizes_tensor(hs, ws)
        stored = np.stack([hs, ws], axis=1) if b else np.zeros((0, 2), np.int64)
    groups: dict[str, list[str]] = {}
    for key in cols.keys:
        group = _group_of(key)
        if group is not None:
            groups.setdefault(group, []).append(key)
        elif key != "image":
            batch[key] = _meta_column(cols, key, b)
    # a shard read's image buffer takes the other tensors into its storage; else pin each
    pin_each = pin and buffer is not batch_buffer
    for group, gkeys in groups.items():
        _group(cols, PADDED_BY_NAME[group], gkeys, pin_each, batch, hw)
    if stored is None:
        return _host(batch, stored, request)
    if draw is not None:
        request = stream_request(draw, batch)
        assert request.crop is not None
    plan = request.crop if request is not None else None
    if plan is not None:
        cropped = read_crop.read(batch, cols.images, plan, functools.partial(buffer, pin=pin))
        return _host(cropped, stored, request, cropped=True)
    images = [im.decode() if isinstance(im, EncodedImage) else im for im in cols.images]
    image = buffer(batch, (b, *hw, 3), pin)
    copy_images(images, stored[:, 0], stored[:, 1], image.numpy())
    batch["image"] = image.permute(0, 3, 1, 2)
    return _host(batch, stored, request)


def _meta_column(cols: HostBatch, key: str, b: int) -> Any:
    """One meta key of the batch: ints as int64, strings and texts as lists, a sample dict's
    other meta as :func:`_meta` batched it; a shard's row columns of kinds not padded
    (texts, taxonomy, relations) stacked when every count matches, else split per sample."""
    if key in cols.batched:
        return cols.batched[key]
    if key in cols.ints:
        return torch.from_numpy(cols.ints[key].astype(np.int64))
    if key in cols.strings:
        return list(cols.strings[key])
    if key in cols.texts:
        return cols.texts[key]  # fresh lists, one per sample
    counts = cols.counts[key.split(".", 1)[0]]
    rows = cols.rows[key]
    if b and bool((counts == counts[0]).all()):
        return torch.from_numpy(np.array(rows.reshape(b, int(counts[0]), *rows.shape[1:])))
    return np.split(rows, np.cumsum(counts)[:-1])


def _slots(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample, slot) of every row of a group whose samples hold ``counts`` rows."""
    sample = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return sample, np.arange(len(sample)) - np.repeat(starts, counts)


def _group(cols: HostBatch, kind: Kind, keys: list[str], pin: bool, batch: Batch,
           hw: tuple[int, int]) -> None:
    """One geometry group: ``<kind>.valid (B, N)``, the kind's own keys (``pad_columns``, or
    padded from sample dicts: ``cols.padded``), every other column padded to ``(B, N, ...)``
    (labels with -1, as int64), texts as lists."""
    b = len(cols)
    group = kind.name
    counts = cols.counts[group]
    nmax = int(counts.max()) if b else 0
    batch[f"{group}.valid"] = torch.from_numpy(np.arange(nmax)[None, :] < counts[:, None])
    own = kind.own_keys()
    if nmax == 0:  # fast path: a group no sample of this batch uses
        for key in keys:
            if key in own:
                continue
            if key in cols.rows:
                rows = cols.rows[key]
                batch[key] = torch.zeros((b, 0, *rows.shape[1:]), dtype=label_dtype(
                    torch_dtype(rows.dtype), key.split(".", 1)[1]))
            else:
                batch[key] = [[] for _ in range(b)]
        kind.pad_empty(b, hw, batch)
        return
    sample, slot = _slots(counts)
    if group in cols.padded:
        batch.update(cols.padded[group])
    else:
        sizes = [(int(im.shape[0]), int(im.shape[1])) for im in cols.images]
        kind.pad_columns(cols.nested, sample, slot, (b, nmax), sizes, batch)
    for key in keys:
        if key in own:
            continue
        name = key.split(".", 1)[1]
        if key in cols.batched:
            batch[key] = cols.batched[key]
        elif key in cols.texts:
            batch[key] = cols.texts[key]  # fresh lists, one per sample
        else:
            rows = cols.rows[key]
            out = zeros_host((b, nmax, *rows.shape[1:]),
                             label_dtype(torch_dtype(rows.dtype), name), pin,
                             -1 if name == "label" else 0)
            out.numpy()[sample, slot] = rows
            batch[key] = out


# --- sample dicts -> columns ----------------------------------------------------------------
def _columns_of(samples: Sequence[dict[str, Any]], pin: bool, decode: bool) -> HostBatch:
    """Sample dicts in our layout as the columns :func:`_assemble` builds a batch from:
    images, int and string meta, lists as texts, each geometry group's rows and counts.
    What columns cannot carry is batched here, as it always was (``HostBatch.batched``:
    float, array and object meta, rows with None, mixed dtypes or shapes, a count that is
    not the group's; ``HostBatch.padded``: the kinds' own keys, ``Kind.pad_samples``).
    ``decode``: JPEGs not decoded yet are decoded whole (no crop reads them)."""
    b = len(samples)
    keys = list(samples[0].keys())
    cols = HostBatch(size=b, keys=keys)
    hw = (0, 0)
    if "image" in samples[0]:
        cols.images = [s["image"] for s in samples]
        if decode:
            cols.images = [im.decode() if isinstance(im, EncodedImage) else im
                           for im in cols.images]
        hs, ws = image_sizes(cols.images)
        hw = (int(hs.max()), int(ws.max()))
    groups: dict[str, list[str]] = {}
    for key in keys:
        group = _group_of(key)
        if group is not None:
            groups.setdefault(group, []).append(key)
        elif key != "image":
            _meta_of(cols, key, [s[key] for s in samples])
    for group, gkeys in groups.items():
        _group_of_samples(cols, samples, PADDED_BY_NAME[group], gkeys, pin, hw)
    return cols


def _meta_of(cols: HostBatch, key: str, values: list[Any]) -> None:
    """One meta key of sample dicts into ``cols``: the first value decides (ints, lists)."""
    first = values[0]
    if isinstance(first, (bool, int, np.integer)) and all(
            isinstance(v, (bool, int, np.integer)) for v in values):
        cols.ints[key] = np.array(values, dtype=np.int64)
    elif isinstance(first, str) and all(isinstance(v, str) for v in values):
        cols.strings[key] = values
    elif isinstance(first, list):
        cols.texts[key] = [list(v) for v in values]
    else:
        cols.batched[key] = _meta(values)


def _meta(values: list[Any]) -> Any:
    """One meta key of the samples in the batch: ints as int64, floats as float64, arrays of
    one shape stacked, lists as lists of lists, anything else as a list."""
    first = values[0]
    if isinstance(first, (bool, int, np.integer)):
        return torch.tensor(values, dtype=torch.int64)
    if isinstance(first, (float, np.floating)):
        return torch.tensor(values, dtype=torch.float64)
    if isinstance(first, list):
        return [list(v) for v in values]
    if isinstance(first, np.ndarray) and all(
            isinstance(v, np.ndarray) and v.shape == first.shape for v in values):
        return torch.from_numpy(np.stack(values))
    return values


def _group_of_samples(cols: HostBatch, samples: Sequence[dict[str, Any]], kind: Kind,
                      keys: list[str], pin: bool, hw: tuple[int, int]) -> None:
    """One geometry group of sample dicts into ``cols``: its counts (the row key's lengths),
    its kind's own keys padded (``cols.padded``), its other keys as rows, texts, or (what
    rows cannot carry) batched."""
    b = len(samples)
    group = kind.name
    row = f"{group}.{kind.row_key}"
    counts = np.fromiter((len(s[row]) if row in s else 0 for s in samples), np.int64, count=b)
    cols.counts[group] = counts
    nmax = int(counts.max()) if b else 0
    own = kind.own_keys()
    if nmax == 0:
        for key in keys:
            v = samples[0][key]
            if key in own:
                continue
            if isinstance(v, np.ndarray):
                cols.rows[key] = np.zeros((0, *v.shape[1:]), v.dtype)
        return
    cols.padded[group] = {}
    kind.pad_samples(samples, counts, nmax, hw, pin, cols.padded[group])
    for key in keys:
        if key in own:
            continue
        vals = [s.get(key) for s in samples]
        if any(isinstance(v, list) for v in vals) or not all(
                isinstance(v, np.ndarray) or v is None for v in vals):
            cols.texts[key] = [list(v) if v is not None else [] for v in vals]
        elif any(v is not None and len(v) != c for v, c in zip(vals, counts, strict=True)):
            cols.batched[key] = [torch.from_numpy(np.ascontiguousarray(v)) if v is not None
                                 else None for v in vals]
        elif (rows := _rows(vals, counts)) is not None:
            cols.rows[key] = rows
        else:
            cols.batched[key] = _pad_rows(vals, counts, nmax, pin,
                                          -1.0 if key.split(".", 1)[1] == "label" else 0.0)


def _rows(vals: list[np.ndarray | None], counts: np.ndarray) -> np.ndarray | None:
    """A group column's rows in batch order; None unless every sample with rows holds an
    array of the first one's dtype and row shape (then :func:`_pad_rows` pads them)."""
    first = next((a for a in vals if a is not None), None)
    if first is None or any(
            (a is None and c) or (a is not None and (a.dtype != first.dtype or
                                                     a.shape[1:] != first.shape[1:]))
            for a, c in zip(vals, counts, strict=True)):
        return None
    return np.concatenate([a for a in vals if a is not None])


def _pad_rows(arrays: Sequence[np.ndarray | None], counts: np.ndarray, nmax: int, pin: bool,
              fill: float) -> torch.Tensor:
    first = next((a for a in arrays if a is not None), None)
    tail = tuple(first.shape[1:]) if first is not None else ()
    dtype = torch_dtype(first.dtype) if first is not None else torch.float32
    dtype = label_dtype(dtype, "label" if fill < 0 else "")
    out = zeros_host((len(arrays), nmax, *tail), dtype, pin, fill)
    view = out.numpy()
    for i, a in enumerate(arrays):
        if a is not None and counts[i]:
            view[i, :counts[i]] = a
    return out


def host_request(host: Any, pipeline: Pipeline | None, seed: int, epoch: int
                 ) -> tuple[Any, HostBatch | None]:
    """The batch to deliver and what the pipeline's ``finish`` runs it with: a
    ``HostBatch`` whose request holds the keyed parameters — drawn once with the request
    (``loaders.request``), else drawn here from the batch's sizes and sample ids; None
    when ``pipeline`` (the pass's) is None or the batch carries no sample ids (then the
    transform runs with a generator seeded per batch).

    Raises:
        UserError: The batch's request was drawn for another seed or epoch (one stream feeds
            two loaders at once).
    """
    batch = host
    if isinstance(host, HostBatch):
        request = host.request
        if request is not None and (request.seed, request.epoch) != (seed, epoch):
            raise UserError(
                f"crop at read: a batch's crops were drawn for seed {request.seed}, epoch "
                f"{request.epoch} but this pass is seed {seed}, epoch {epoch} — one stream "
                "feeds two loaders at once; give each loader its own stream or pass "
                "read_crop=False")
        batch = host.as_dict()
        if request is not None and request.params is not None:
            return batch, host
    if pipeline is None or not isinstance(batch, Mapping) or \
            not isinstance(batch.get("sizes"), torch.Tensor):
        return batch, None
    request = pipeline.draw_for(batch, seed, epoch)
    if request is None:
        return batch, None
    if isinstance(host, HostBatch):
        return batch, dataclasses.replace(host, request=request)
    return batch, HostBatch(request)
