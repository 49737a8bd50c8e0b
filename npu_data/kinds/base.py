"""What every annotation kind declares (``Kind``) and the generic behaviour it inherits.

A kind is one group of rows in the ``AnnotationTable`` and in a shard (``<name>.<column>``
columns plus ``<name>.offsets``). Its module (``npu_data/kinds/<name>.py``) owns the schema,
the columns the writer adds, how a sample's and a batch's rows are read and how its results
are read from an export, and declares its geometry (``Kind.geometry``, a layout of
``npu_data.kinds.geometry``: how collate pads it and how it follows a resized crop, a flip or
a warp); the registry (``npu_data/kinds/registry.py``) lists the kinds and is the only such
list.

Kind modules import no torch at module level (``npu_data.annotations``, whose parser never
needs torch, imports the registry); the collate hooks import it when they are called. Kinds
sit below ``npu_data.annotations`` and ``npu_data.transforms`` (as torchvision's tv_tensors
below its transforms) and import neither, not even for typing: their callers hand the hooks
what they need, typed by the Protocols of ``npu_data.kinds.protocols`` — the value checks
(``ValueChecks``), the extraction toolkit ``npu_data.annotations.results`` as ``R``
(``Extraction``), the kernels ``transforms.geometry`` as ``G`` (``GeometryKernels``).

The drawing hooks (``paint``, ``unbatch``) serve the previews (``previews/``), which
hand over their ``Canvas`` (``protocols.Canvas``).
The WebDataset JSON hooks (``json_*``) map one sample's columns to and from the kind's part
of a tar's ``<key>.json`` (``formats/webdataset/mapping.py`` iterates them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from npu_data.batch import Batch
from npu_data.common.ragged import offsets_of
from npu_data.kinds.protocols import (
    Canvas,
    Extraction,
    ExtractionContext,
    GeometryKernels,
    GeometryWarp,
    ResultBatch,
    RowsT,
    ValueChecks,
)

if TYPE_CHECKING:
    import torch

    from npu_data.kinds.geometry import Geometry

Col = tuple[np.dtype, tuple[int, ...]]  # dtype, trailing shape
I8, I16, I32, U8 = np.dtype("<i8"), np.dtype("<i2"), np.dtype("<i4"), np.dtype("u1")
F32, F64 = np.dtype("<f4"), np.dtype("<f8")
COMMON: dict[str, Col] = {"control": (I16, ()), "annotation": (I8, ()), "source": (U8, ())}


@dataclass(frozen=True)
class Nested:
    """A variable-length value per row: ``values`` indexed by ``offsets`` (rows + 1)."""

    values: str
    offsets: str
    dtype: np.dtype
    shape: tuple[int, ...]
    sample: str | None = None  # the sample key of the values unpacked (None: as stored)


@dataclass(frozen=True)
class Kind:
    """One annotation kind. Subclasses override the hooks whose generic version does not fit.

    ``name``: the column prefix; ``result_types``: the Label Studio result types it holds;
    ``fixed``: fixed-width row columns of the table (percent, as exported); ``text``: text
    columns (one string per row); ``nested``: variable-length values per row; ``pixel``:
    stored columns converted to float32 pixels of the stored image (name -> trailing shape,
    including ``derived``, the pixel columns the writer adds); ``row_key``: the sample key
    whose first dimension counts a sample's rows — the kinds with one are padded into
    ``(B, N, ...)`` with ``<name>.valid``, the others collate their rows as they are;
    ``top_level``: its results hold their fields at the top level (no ``value``, no
    ``from_name``; ``control`` is -1); ``geometry``: how its padded rows sit in a batch and
    follow the image (``kinds.geometry``; None: they do not move); ``added``: fixed columns
    newer than the format's first datasets, read as a default where a shard or tar lacks
    them (``fill_added``).
    """

    name: str
    result_types: tuple[str, ...]
    fixed: dict[str, Col]
    text: tuple[str, ...] = ("rid",)
    nested: tuple[Nested, ...] = ()
    pixel: dict[str, tuple[int, ...]] = field(default_factory=dict)
    derived: tuple[str, ...] = ()
    row_key: str | None = None
    top_level: bool = False
    json_text: tuple[str, ...] = ()  # text columns holding JSON (version-1 tars: JSON values)
    paint_first: bool = False  # drawn under the other kinds (translucent areas)
    geometry: Geometry | None = None
    # fixed columns the format gained later (name -> the value of each row of a shard or tar
    # written before, where the column is absent): ``boxes.iscrowd`` (2026-12-07)
    added: dict[str, int] = field(default_factory=dict)

    # --- schema ------------------------------------------------------------------------
    def stored_columns(self) -> dict[str, Col]:
        """Every ``ann.<column>.npy`` of this kind in a shard: column -> (dtype, shape)."""
        n = self.name
        out: dict[str, Col] = {f"{n}.offsets": (I8, ())}
        for name, col in self.fixed.items():
            out[f"{n}.{name}"] = (F32, self.pixel[name]) if name in self.pixel else col
        for name in self.text:
            out[f"{n}.{name}.bytes"], out[f"{n}.{name}.offsets"] = (U8, ()), (I8, ())
        for nest in self.nested:
            px = nest.values in self.pixel
            out[f"{n}.{nest.values}"] = (F32, self.pixel[nest.values]) if px else (
                nest.dtype, nest.shape)
            out[f"{n}.{nest.offsets}"] = (I8, ())
        for name in self.derived:
            out[f"{n}.{name}"] = (F32, self.pixel[name])
        return out

    def empty_columns(self) -> dict[str, np.ndarray]:
        """The table columns of this kind for zero samples."""
        n = self.name
        cols: dict[str, np.ndarray] = {f"{n}.offsets": np.zeros(1, np.int64)}
        for name, (dt, shape) in self.fixed.items():
            cols[f"{n}.{name}"] = np.zeros((0, *shape), dtype=dt)
        for name in self.text:
            cols[f"{n}.{name}.bytes"] = np.zeros(0, np.uint8)
            cols[f"{n}.{name}.offsets"] = np.zeros(1, np.int64)
        for nest in self.nested:
            cols[f"{n}.{nest.values}"] = np.zeros((0, *nest.shape), dtype=nest.dtype)
            cols[f"{n}.{nest.offsets}"] = np.zeros(1, np.int64)
        return cols

    def fill_added(self, cols: dict[str, Any], rows: int) -> None:
        """The ``added`` columns absent from ``cols`` (a shard's or a tar's, written before
        they existed) as ``rows`` rows of their default."""
        for name, default in self.added.items():
            key = f"{self.name}.{name}"
            if key not in cols:
                dt, shape = self.fixed[name]
                cols[key] = np.full((rows, *shape), default, dt)

    def row_columns(self) -> list[str]:
        """The stored fixed-width row columns (table columns, then the derived ones)."""
        return [*self.fixed, *self.derived]

    # --- import ------------------------------------------------------------------------
    def check(self, c: ValueChecks) -> None:
        """Fail (``c.fail(row, why)``) the results whose values this kind cannot read; none
        by default."""

    def extract(self, ctx: ExtractionContext, b: ResultBatch, R: Extraction[RowsT]) -> RowsT:
        """This kind's rows from its results ``b`` of one chunk (``R``: the extraction
        toolkit, the module ``npu_data.annotations.results``, handed over by the parser)."""
        raise NotImplementedError(f"kind {self.name!r} has no extract hook")

    def to_pixels(self, cols: Mapping[str, np.ndarray], heights: np.ndarray,
                  widths: np.ndarray) -> dict[str, np.ndarray]:
        """This kind's columns of ``cols`` that change when percent becomes pixels of images
        ``heights`` x ``widths`` (per sample, float64): by default its stored ``pixel``
        columns, fixed or nested, through ``percent_to_pixels``."""
        n, stored = self.name, [c for c in self.pixel if c not in self.derived]
        if not stored:
            return {}
        rows = row_sample(cols[f"{n}.offsets"])
        out: dict[str, np.ndarray] = {}
        for c in stored:
            nest = next((t for t in self.nested if t.values == c), None)
            r = rows if nest is None else rows[row_sample(cols[f"{n}.{nest.offsets}"])]
            a = np.asarray(cols[f"{n}.{c}"]).reshape(-1, *self.pixel[c])
            out[f"{n}.{c}"] = percent_to_pixels(a, widths[r], heights[r]).astype(F32)
        return out

    # --- one sample (``ShardDataset[i]``) ------------------------------------------------
    def sample_keys(self) -> list[str]:
        """The keys this kind adds to a sample dict, in order."""
        n = self.name
        keys = [f"{n}.{c}" for c in self.fixed] + [f"{n}.{c}" for c in self.text]
        for nest in self.nested:
            keys += ([f"{n}.{nest.sample}"] if nest.sample else
                     [f"{n}.{nest.values}", f"{n}.{nest.offsets}"])
        return keys + [f"{n}.{c}" for c in self.derived]

    def read_sample(self, col: Callable[[str], np.ndarray], j: int,
                    hw: tuple[int, int]) -> dict[str, Any]:
        """Sample ``j``'s rows of this kind, read through ``col(name)`` (a shard's columns);
        ``hw``: the stored image's (height, width)."""
        n = self.name
        off = col(f"{n}.offsets")
        a, b = int(off[j]), int(off[j + 1])
        s: dict[str, Any] = {f"{n}.{c}": np.asarray(col(f"{n}.{c}")[a:b]) for c in self.fixed}
        for c in self.text:
            s[f"{n}.{c}"] = read_texts(col, f"{n}.{c}", a, b)
        for nest in self.nested:
            voff = np.asarray(col(f"{n}.{nest.offsets}")[a:b + 1])
            vals = col(f"{n}.{nest.values}")[int(voff[0]):int(voff[-1])]
            s.update(self.nested_sample(nest, np.asarray(vals), voff - voff[0], hw))
        for c in self.derived:
            s[f"{n}.{c}"] = np.asarray(col(f"{n}.{c}")[a:b])
        return s

    def stored_problem(self, col: Callable[[str], np.ndarray],
                       sizes: np.ndarray) -> str | None:
        """What is wrong with this kind's stored rows beyond their offsets and row counts
        (checked by ``shards.file_checks`` before any read), read through ``col(name)``;
        ``sizes``: (samples, 2) height, width of each sample's stored image. None: nothing."""
        return None

    def nested_sample(self, nest: Nested, values: np.ndarray, offsets: np.ndarray,
                      hw: tuple[int, int]) -> dict[str, np.ndarray]:
        """The sample keys of one nested column: values and local offsets (start at 0)."""
        return {f"{self.name}.{nest.values}": values, f"{self.name}.{nest.offsets}": offsets}

    # --- collate and geometry (padded kinds: ``self.geometry``'s) -------------------------
    def own_keys(self) -> tuple[str, ...]:
        """Sample keys the padding hooks below handle (the rest: generic row padding)."""
        return () if self.geometry is None else self.geometry.own_keys(self.name)

    def pad_samples(self, samples: Sequence[Mapping[str, Any]], counts: np.ndarray,
                    nmax: int, hw: tuple[int, int], pin: bool, batch: Batch) -> None:
        """Pad ``own_keys`` of sample dicts into ``batch`` (``counts`` rows each, > 0 max)."""
        if self.geometry is not None:
            self.geometry.pad_samples(self.name, samples, counts, nmax, hw, pin, batch)

    def pad_columns(self, nested: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    sample: np.ndarray, slot: np.ndarray, bn: tuple[int, int],
                    sizes: Sequence[tuple[int, int]], batch: Batch) -> None:
        """Pad ``own_keys`` from a batch read column-wise: ``nested[<name>.<values>] =
        (values, per-row lengths)`` in batch row order; row ``r`` goes to
        ``(sample[r], slot[r])`` of ``bn = (B, N)``; ``sizes``: each sample's image size."""
        if self.geometry is not None:
            self.geometry.pad_columns(self.name, nested, sample, slot, bn, sizes, batch)

    def pad_empty(self, b: int, hw: tuple[int, int], batch: Batch) -> None:
        """``own_keys`` for a batch without any row of this kind."""
        if self.geometry is not None:
            self.geometry.pad_empty(self.name, b, hw, batch)

    def resized_crop(self, batch: Batch, crop_boxes: torch.Tensor, out_size: tuple[int, int],
                     min_visible: float, G: GeometryKernels) -> Batch:
        """This kind's keys of ``batch`` through a resized crop (only the keys present);
        ``G``: the geometry kernels (``npu_data.transforms.geometry``)."""
        if self.geometry is None:
            return {}
        return self.geometry.resized_crop(self.name, batch, crop_boxes, out_size, min_visible, G)

    def hflip(self, batch: Batch, widths: torch.Tensor, flip: torch.Tensor,
              G: GeometryKernels) -> Batch:
        """This kind's keys of ``batch`` mirrored where ``flip`` (B,) is set."""
        if self.geometry is None:
            return {}
        return self.geometry.hflip(self.name, batch, widths, flip, G)

    def warp(self, batch: Batch, W: GeometryWarp, G: GeometryKernels) -> Batch:
        """This kind's keys of ``batch`` through an affine warp ``W`` (affine, rotation,
        vertical flip, zoom-out, crops: the pixels' maps)."""
        if self.geometry is None:
            return {}
        return self.geometry.warp(self.name, batch, W, G)

    # --- WebDataset JSON (pixel coordinates of the stored image) --------------------------
    def json_columns(self) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        """(name, dtype in a sample dict, trailing shape) of the numeric JSON columns."""
        out = [(c, F32 if c in self.pixel else dt, shape) for c, (dt, shape) in self.fixed.items()]
        out += [(c, F32, self.pixel[c]) for c in self.derived]
        for nest in self.nested:
            px = nest.values in self.pixel
            out += [(nest.values, F32 if px else nest.dtype, nest.shape),
                    (nest.offsets, I8, ())]
        return out

    def json_part(self, s: Mapping[str, Any]) -> dict[str, Any]:
        """The version-2 JSON part of sample dict ``s`` (it has rows of this kind)."""
        n = self.name
        g: dict[str, Any] = {c: np.ascontiguousarray(s[f"{n}.{c}"]) for c, _, _ in
                             self.json_columns()}
        g.update({c: list(s[f"{n}.{c}"]) for c in self.text})
        return g

    def json_empty(self) -> dict[str, Any]:
        """The sample columns without rows (fresh lists, shared read-only arrays)."""
        n = self.name
        cols: dict[str, Any] = {}
        for c, dt, shape in self.json_columns():
            offsets = any(c == nest.offsets for nest in self.nested)
            cols[f"{n}.{c}"] = _frozen(np.zeros(1 if offsets else (0, *shape), dt))
        cols.update({f"{n}.{c}": [] for c in self.text})
        return cols

    def json_read(self, g: Mapping[str, Any], hw: tuple[int, int]) -> dict[str, Any]:
        """The sample columns of a version-2 part ``g`` (ValueError/KeyError if malformed)."""
        n = self.name
        cols: dict[str, Any] = {f"{n}.{c}": np.array(g[c], dt).reshape(-1, *shape)
                                for c, dt, shape in self.json_columns()
                                if c in g or c not in self.added}
        self.fill_added(cols, len(g["control"]))
        for c in self.text:
            if not all(type(t) is str for t in g[c]):
                raise ValueError(f"{n}.{c}: not a list of strings")
            cols[f"{n}.{c}"] = g[c]
        self.json_check(cols, len(g["control"]), hw)
        return cols

    def json_sample(self, cols: dict[str, Any], hw: tuple[int, int]) -> None:
        """Turn the read columns into the sample dict's keys where they differ (the stream's
        sample dict is ``ShardDataset[i]``'s); nothing by default."""

    def json_v1(self, cols: dict[str, Any], rows: list[dict[str, Any]],
                hw: tuple[int, int]) -> None:
        """Fix up ``cols`` read from version-1 ``rows`` (one dict per row) generically: the
        columns the generic reading cannot give; none by default."""

    def json_check(self, cols: Mapping[str, Any], n: int, hw: tuple[int, int]) -> None:
        """ValueError unless every row column has ``n`` rows and nested ones add up."""
        name, numeric = self.name, [c for c, _, _ in self.json_columns()]
        offsets = {t.offsets: t.values for t in self.nested if t.offsets in numeric}
        values = set(offsets.values())
        for c in numeric:
            if c not in values and c not in offsets and len(cols[f"{name}.{c}"]) != n:
                raise ValueError(f"{name}.{c} has {len(cols[f'{name}.{c}'])} rows, "
                                 f"{name}.control has {n}")
        for c in self.text:
            if len(cols[f"{name}.{c}"]) != n:
                raise ValueError(f"{name}.{c} has {len(cols[f'{name}.{c}'])} rows, "
                                 f"{name}.control has {n}")
        for off_name, val_name in offsets.items():
            off, vals = cols[f"{name}.{off_name}"], cols[f"{name}.{val_name}"]
            if len(off) != n + 1 or off[0] != 0 or off[-1] != len(vals) or (
                    np.diff(off) < 0).any():
                raise ValueError(f"{name}.{off_name} does not match {name}.{val_name}")

    def to_percent(self, column: str, a: np.ndarray, w: np.ndarray,
                   h: np.ndarray) -> np.ndarray:
        """Pixel column ``column`` (float64, rows on images ``w`` x ``h``) in percent: the
        inverse of ``to_pixels`` (``pixels_to_percent``)."""
        return pixels_to_percent(a, w, h)

    def table_nested(self, per: Sequence[Mapping[str, Any]], rows_w: np.ndarray,
                     rows_h: np.ndarray) -> dict[str, np.ndarray]:
        """The table's nested columns (values, offsets) of samples ``per`` (their sample
        columns; rows on images ``rows_w`` x ``rows_h``): pixel values back to percent."""
        n, out = self.name, {}
        for nest in self.nested:
            lengths = np.concatenate([np.diff(c[f"{n}.{nest.offsets}"]) for c in per])
            vals = np.concatenate([c[f"{n}.{nest.values}"] for c in per]).astype(np.float64)
            if nest.values in self.pixel:
                vals = self.to_percent(nest.values, vals, np.repeat(rows_w, lengths),
                                       np.repeat(rows_h, lengths))
            out[f"{n}.{nest.values}"] = vals.astype(nest.dtype)
            out[f"{n}.{nest.offsets}"] = offsets_of(lengths)
        return out

    # --- drawing (previews/canvas.py) -------------------------------------------------------
    def paint(self, canvas: Canvas, sample: Mapping[str, Any]) -> None:
        """Draw this kind's rows of ``sample`` on ``canvas`` (``previews.canvas.Canvas``: the
        picture, its scale, colours and label names); nothing by default."""

    def unbatch(self, batch: Mapping[str, np.ndarray], i: int,
                hw: tuple[int, int]) -> dict[str, np.ndarray]:
        """Sample ``i``'s rows (of an image ``hw``) of a padded host batch: the ``(B, N, ...)``
        keys at its valid slots; nothing for kinds collated unpadded."""
        keep = batch.get(f"{self.name}.valid")
        if keep is None:
            return {}
        ok = np.asarray(keep[i]).astype(bool)
        return {k: np.asarray(batch[k][i])[ok] for k in self.sample_keys()
                if isinstance(batch.get(k), np.ndarray) and batch[k].shape[:2] == keep.shape}


def _per_axis(a: np.ndarray, w: np.ndarray, h: np.ndarray,
              f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Rows ``a`` (float64) with their x values through ``f(values, w)`` and their y values
    through ``f(values, h)`` (``w``, ``h``: per row). By trailing shape: ``(..., 2)`` x, y
    points; ``(5,)`` x, y, width, height and an angle (kept); ``()`` a length along x."""
    wr = w.reshape(len(a), *([1] * (a.ndim - 1)))
    if a.ndim == 1:
        return f(a, wr)
    hr = h.reshape(len(a), *([1] * (a.ndim - 1)))
    if a.shape[-1] == 2:
        xs, ys = [0], [1]
    elif a.shape[1:] == (5,):
        xs, ys = [0, 2], [1, 3]
    else:
        raise NotImplementedError(f"no percent <-> pixels rule for rows of shape {a.shape[1:]}")
    out = a.astype(np.float64)
    out[..., xs] = f(a[..., xs], wr)
    out[..., ys] = f(a[..., ys], hr)
    return out


def percent_to_pixels(a: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Percent rows (``_per_axis``'s shapes) as pixels of images ``w`` x ``h`` (per row)."""
    return _per_axis(a, w, h, lambda v, size: v * size / 100.0)


def pixels_to_percent(a: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Pixel rows (``_per_axis``'s shapes) on images ``w`` x ``h`` (per row) in percent."""
    return _per_axis(a, w, h, lambda v, size: v * (100.0 / size))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared by every sample without rows (as read-only as mmaps)
    return a


def row_sample(offsets: np.ndarray) -> np.ndarray:
    """Sample index of every row of a group with ``offsets``."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def read_texts(col: Callable[[str], np.ndarray], name: str, a: int, b: int) -> list[str]:
    """Strings ``a:b`` of text column ``name``."""
    off = col(f"{name}.offsets")[a:b + 1]
    data = col(f"{name}.bytes")
    return [bytes(data[int(off[t]):int(off[t + 1])]).decode("utf-8") for t in range(b - a)]
