"""Batched reads of a ShardDataset: a whole batch's columns with a few numpy ops per shard.

``ShardDataset.__getitems__`` returns a ``HostBatch`` (:func:`requested`): the batch's sample
dicts that the loaders' assembler (``loaders.assemble``) builds from ``read_columns`` in one
shot (no per-sample dict, no per-sample array); given a ``BatchRequest`` it keeps it, and a
request with a crop keeps JPEGs encoded for the crop's region decoder. ``read_columns``
groups the indices by shard, gathers every annotation column with one fancy index per shard
(``ranges_index`` over the samples' rows), skips groups empty for the whole batch, and keeps
the images as zero-copy views (raw) or decoded arrays (encoded) for the assembler to copy
once into the padded buffer.

**Captions**, where a sample's ``caption`` comes from (:func:`pick`).
Caption sets are kept two ways in Label Studio: as TextArea results (an annotator wrote or
corrected them) and in the task data (``{"data": {"image": ..., "caption": ...}}``, how caption
files are usually imported). A sample's caption is its first TextArea text; without one, the
first of the task data fields ``caption``, ``text``, ``prompt`` that holds a non-empty string.
``caption_field="key"`` names the data field instead, and it comes first (TextArea texts are
the fallback). A field may hold a list of strings: its first non-empty one is the caption.
The task data is stored with every sample (``data_json``), so the rule applies to datasets
imported before it existed too. A sample's *captions* (:func:`captions_of`, what ``npu-data
encode`` embeds one row each of) are every text where the caption came from: all its TextArea
texts, or every string of the field's list; the caption is the first.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from npu_data.annotations.table import ranges_index
from npu_data.batch import BatchRequest, EncodedImage, HostBatch
from npu_data.errors import UserError, UserValueError
from npu_data.kinds.base import Kind
from npu_data.kinds.texts import CAPTION_OF
from npu_data.shards.format import ENC_JPEG, ENC_RAW


def as_index(i: Any) -> int:
    """``i`` as a sample index: an integer (Python or numpy); TypeError otherwise, as a list
    raises (``ds[1.5]``, ``ds["1"]`` are mistakes, not sample 1)."""
    try:
        return operator.index(i)
    except TypeError:
        raise TypeError(f"dataset indices must be integers, not {type(i).__name__}") from None


def sample_keys(kinds: Sequence[Kind]) -> list[str]:
    """The keys of a ``ShardDataset`` sample dict of a dataset with ``kinds``, in the order
    ``ds[i]`` inserts them."""
    keys = ["image", "index", "task_id", "original_size"]
    for kind in kinds:
        keys += kind.sample_keys()
    return [*keys, "caption"]


class Shards(Protocol):
    """What a batch read needs of a ``reader.ShardDataset`` (which imports this module)."""

    path: Any
    kinds: tuple[Kind, ...]
    _starts: np.ndarray

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    def shard(self, k: int) -> Any: ...
    def image(self, k: int, local: int) -> np.ndarray: ...
    def physical(self, indices: Sequence[int] | np.ndarray) -> np.ndarray: ...


def requested(dataset: Shards, indices: Sequence[int] | BatchRequest) -> HostBatch:
    """The samples ``indices`` of ``dataset`` as the ``HostBatch`` the loaders' assembler
    reads: indexing gives ``dataset[i]`` dicts (cached); ``columns()`` reads the whole batch
    at once (:func:`read_columns`; with the request's crop JPEGs stay encoded,
    ``EncodedImage``, for the region decoder); ``request``: the ``BatchRequest`` it was
    read for (None: plain indices)."""
    request = indices if isinstance(indices, BatchRequest) else None
    at = [as_index(i) for i in indices]
    lazy = request is not None and request.crop is not None
    return HostBatch(request, sample=lambda j: dataset[at[j]],
                     read=lambda: read_columns(dataset, at, lazy_jpeg=lazy), size=len(at))


class _Part:
    """The batch's samples that live in one shard: their batch positions and shard indices."""

    def __init__(self, ds: Shards, k: int, pos: np.ndarray, local: np.ndarray) -> None:
        self.k, self.pos, self.local = k, pos, local
        self.shard = ds.shard(k)
        self.rec = self.shard.index[local]


def read_columns(ds: Shards, indices: Sequence[int],
                 lazy_jpeg: bool = False) -> HostBatch:
    """Read samples ``indices`` of ``ds`` column-wise (the values ``ds[i]`` would hold);
    ``lazy_jpeg``: JPEG images stay ``EncodedImage`` (decoded by the reader's crop)."""
    given = np.asarray(indices)
    if given.size and given.dtype.kind not in "iu":
        raise TypeError(f"dataset indices must be integers, not {given.dtype}")
    gi = ds.physical(given)  # a repeat's virtual id reads its sample (shards.repeats)
    try:
        return _read(ds, gi, lazy_jpeg)
    except UserError:
        raise
    except Exception:
        for i in gi.tolist():  # name the sample: ds[i] raises the per-sample error
            ds[i]
        raise


def _read(ds: Shards, gi: np.ndarray, lazy_jpeg: bool = False) -> HostBatch:
    b = len(gi)
    shard_of = np.searchsorted(ds._starts, gi, side="right") - 1
    local = gi - ds._starts[shard_of]
    parts = []
    for k in np.unique(shard_of).tolist():
        pos = np.flatnonzero(shard_of == k)
        parts.append(_Part(ds, k, pos, local[pos]))
    order = np.concatenate([p.pos for p in parts]) if parts else np.zeros(0, np.int64)
    task_id = np.zeros(b, np.int64)
    original = np.zeros((b, 2), np.int64)
    images: list[Any] = [np.zeros((0, 0, 3), np.uint8)] * b
    raws = [b""] * b
    for p in parts:
        task_id[p.pos] = p.rec["task_id"]
        original[p.pos] = p.shard.originals()[p.local]
        for i, j in zip(p.pos.tolist(), p.local.tolist(), strict=True):
            raws[i] = p.shard.data_json(j)
        _part_images(ds, p, images, lazy_jpeg)
    cols = HostBatch(size=b, keys=sample_keys(ds.kinds), images=images,
                     ints={"index": gi.astype(np.int64), "task_id": task_id,
                           "original_size": original})
    for kind in ds.kinds:
        _read_group(kind, parts, order, b, cols)
    field = getattr(ds, "caption_field", None)
    cols.strings["caption"] = [pick(t, raw, field) for t, raw in
                               zip(cols.texts.get(CAPTION_OF, [[]] * b), raws, strict=True)]
    return cols


def _part_images(ds: Shards, p: _Part, images: list[Any], lazy_jpeg: bool) -> None:
    data = p.shard.data
    rec = p.rec
    offs, lens = rec["offset"].tolist(), rec["length"].tolist()
    hs, ws, cs = rec["height"].tolist(), rec["width"].tolist(), rec["channels"].tolist()
    enc = rec["encoding"].tolist()
    for t, i in enumerate(p.pos.tolist()):
        if enc[t] == ENC_RAW:
            images[i] = data[offs[t]:offs[t] + lens[t]].reshape(hs[t], ws[t], cs[t])
        elif lazy_jpeg and enc[t] == ENC_JPEG and cs[t] == 3:
            images[i] = EncodedImage(data[offs[t]:offs[t] + lens[t]], (hs[t], ws[t], 3), ds,
                                     p.k, int(p.local[t]))
        else:
            images[i] = ds.image(p.k, int(p.local[t]))


def _to_batch_order(counts: np.ndarray, order: np.ndarray) -> np.ndarray | None:
    """Permutation from rows in part order (shard by shard) to rows in batch order."""
    if len(order) == 0 or np.all(order[1:] > order[:-1]):
        return None  # one shard, or shards already in batch order
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    part_starts = np.zeros(len(order), np.int64)
    np.cumsum(counts[order][:-1], out=part_starts[1:])
    return ranges_index(part_starts[inv], counts)


def _gather(parts: list[_Part], name: str, rows: list[np.ndarray],
            perm: np.ndarray | None) -> np.ndarray:
    got = [np.asarray(p.shard.col(name)[r]) for p, r in zip(parts, rows, strict=True)]
    out = got[0] if len(got) == 1 else np.concatenate(got)
    return out if perm is None else out[perm]


def _gather_texts(parts: list[_Part], name: str, rows: list[np.ndarray],
                  perm: np.ndarray | None) -> list[str]:
    out: list[str] = []
    for p, r in zip(parts, rows, strict=True):
        off = p.shard.col(f"{name}.offsets")
        a, e = np.asarray(off[r]), np.asarray(off[r + 1])
        raw = np.asarray(p.shard.col(f"{name}.bytes")[ranges_index(a, e - a)]).tobytes()
        cut = _bounds(e - a)
        out += [raw[s:t].decode("utf-8") for s, t in zip(cut[:-1], cut[1:], strict=True)]
    return out if perm is None else [out[t] for t in perm.tolist()]


def _bounds(counts: np.ndarray) -> list[int]:
    """[0, c0, c0 + c1, ...]: where each of ``counts`` consecutive runs starts and ends."""
    return [0, *np.cumsum(counts).tolist()]


def _split(values: list[str], counts: np.ndarray) -> list[list[str]]:
    cut = _bounds(counts)
    return [values[s:t] for s, t in zip(cut[:-1], cut[1:], strict=True)]


def _read_group(kind: Kind, parts: list[_Part], order: np.ndarray, b: int,
                cols: HostBatch) -> None:
    group = kind.name
    counts = np.zeros(b, np.int64)
    starts = []
    for p in parts:
        off = np.asarray(p.shard.col(f"{group}.offsets")[np.concatenate([p.local, p.local + 1])])
        a, e = off[:len(p.local)], off[len(p.local):]
        counts[p.pos] = e - a
        starts.append(a)
    cols.counts[group] = counts
    names = kind.row_columns()
    if not counts.any():  # empty for the whole batch: typed empty columns, nothing read
        first = parts[0].shard if parts else None
        for name in names:
            cols.rows[f"{group}.{name}"] = _empty_col(first, f"{group}.{name}")
        for name in kind.text:
            cols.texts[f"{group}.{name}"] = [[] for _ in range(b)]
        for nest in kind.nested:
            cols.nested[f"{group}.{nest.values}"] = (
                _empty_col(first, f"{group}.{nest.values}"), np.zeros(0, np.int64))
        return
    rows = [ranges_index(a, counts[p.pos]) for p, a in zip(parts, starts, strict=True)]
    perm = _to_batch_order(counts, order)
    for name in names:
        cols.rows[f"{group}.{name}"] = _gather(parts, f"{group}.{name}", rows, perm)
    for name in kind.text:
        key = f"{group}.{name}"
        cols.texts[key] = _split(_gather_texts(parts, key, rows, perm), counts)
    for nest in kind.nested:
        cols.nested[f"{group}.{nest.values}"] = _read_nested(
            f"{group}.{nest.values}", f"{group}.{nest.offsets}", parts, rows, perm)


def _empty_col(shard: Any, name: str) -> np.ndarray:
    return np.asarray(shard.col(name)[:0]) if shard is not None else np.zeros(0, np.float32)


def _read_nested(values: str, offsets: str, parts: list[_Part], rows: list[np.ndarray],
                 perm: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length values of each row (polygon points, mask bits) and their lengths, in
    batch row order."""
    counts, got = [], []
    for p, r in zip(parts, rows, strict=True):
        off = p.shard.col(offsets)
        a, e = np.asarray(off[r]), np.asarray(off[r + 1])
        counts.append(e - a)
        got.append(np.asarray(p.shard.col(values)[ranges_index(a, e - a)]))
    per_row = counts[0] if len(counts) == 1 else np.concatenate(counts)
    vals = got[0] if len(got) == 1 else np.concatenate(got)
    if perm is not None:
        starts = np.zeros(len(per_row), np.int64)
        np.cumsum(per_row[:-1], out=starts[1:])
        vals = vals[ranges_index(starts[perm], per_row[perm])]
        per_row = per_row[perm]
    return vals, per_row


# --- captions (module doc) ---
FIELDS = ("caption", "text", "prompt")


def check_field(field: str | None, who: str) -> str | None:
    """``caption_field`` as given: None or a non-empty string."""
    if field is not None and (not isinstance(field, str) or not field):
        raise UserValueError(f"{who}: caption_field={field!r} must be the task data key that "
                             "holds the caption, e.g. caption_field='caption'")
    return field


def data_captions(raw: bytes, field: str | None) -> list[str]:
    """The captions in one sample's task data JSON: the first of the fields (``field``, else
    ``caption``, ``text``, ``prompt``) that holds a non-empty string, or a list with some —
    its non-empty strings, in order (``[]``: none)."""
    names = (field,) if field else FIELDS
    if not raw or not any(b'"' + n.encode() + b'"' in raw for n in names):
        return []
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
    for n in names:
        v = data.get(n)
        if isinstance(v, str) and v.strip():
            return [v]
        if isinstance(v, list):
            found = [x for x in v if isinstance(x, str) and x.strip()]
            if found:
                return found
    return []


def from_data(raw: bytes, field: str | None) -> str:
    """The caption in one sample's task data JSON (``""``: none): its first."""
    found = data_captions(raw, field)
    return found[0] if found else ""


def pick(texts: Sequence[str], raw: bytes, field: str | None) -> str:
    """A sample's caption from its TextArea ``texts`` and task data ``raw`` (module doc)."""
    if field:
        return from_data(raw, field) or (texts[0] if texts else "")
    return texts[0] if texts else from_data(raw, None)


def captions_of(texts: Sequence[str], raw: bytes, field: str | None) -> list[str]:
    """Every caption of a sample, :func:`pick`'s first: where ``pick`` takes the TextArea
    texts, all of them (as ``RandomCaption`` chooses among them); where it takes the task
    data, the field's string or list (``[]``: no caption)."""
    if field:
        return data_captions(raw, field) or list(texts)
    return list(texts) or data_captions(raw, None)


def sample_captions(ds: Any, i: int) -> list[str]:
    """Sample ``i``'s captions (:func:`captions_of`) in image dataset ``ds`` (a
    ``ShardDataset``, its ``caption_field``), read from its TextArea column and task data
    only (no pixels)."""
    k, j = ds.locate(i)
    sh = ds.shard(k)
    group = CAPTION_OF.split(".")[0]
    kind = next((kd for kd in ds.kinds if kd.name == group), None)
    texts = kind.read_sample(sh.col, j, (0, 0)).get(CAPTION_OF, []) if kind else []
    return captions_of(list(texts), sh.data_json(j), getattr(ds, "caption_field", None))


@dataclass
class Coverage:
    """How many samples take their caption from where."""

    textarea: int = 0
    data: dict[str, int] | None = None
    none: int = 0
    stored: int = 0  # a latents store's captions, as encoded

    def line(self) -> str:
        """One line: ``captions: 20 from TextArea results, 5 from task data 'caption', ...``."""
        parts = [f"{self.textarea} from TextArea results"] if self.textarea else []
        parts += [f"{self.stored} stored with the latents"] if self.stored else []
        parts += [f"{n} from task data {k!r}" for k, n in sorted((self.data or {}).items())]
        parts.append(f"{self.none} without")
        return "captions: " + ", ".join(parts)

    @property
    def any(self) -> bool:
        return bool(self.textarea or self.data or self.stored)


def coverage(texts: Sequence[Sequence[str]], raws: Sequence[bytes],
             field: str | None) -> Coverage:
    """Where each sample's caption comes from, counted."""
    out = Coverage(data={})
    assert out.data is not None
    for t, raw in zip(texts, raws, strict=True):
        first = (field,) if field else FIELDS
        src = None
        if not field and t:
            src = "textarea"
        else:
            for n in first:
                if from_data(raw, n):
                    src = n
                    break
            if src is None and t:
                src = "textarea"
        if src == "textarea":
            out.textarea += 1
        elif src is None:
            out.none += 1
        else:
            out.data[src] = out.data.get(src, 0) + 1
    return out
