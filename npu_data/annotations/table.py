"""The columnar annotation table: numpy columns with offsets, no Python object per task.

Column names are ``<name>`` for per-sample columns and ``<group>.<name>`` for the rows of a
group; each group has ``<group>.offsets`` (num_samples + 1, int64) mapping sample ``i`` to its
rows ``offsets[i]:offsets[i+1]``. Variable-length values inside a row (polygon points, mask
bits, text) use a second offsets column: ``points`` via ``point_offsets``, ``bits`` via
``bit_offsets``, and a text column ``<name>`` via ``<name>.bytes`` + ``<name>.offsets``.
See docs/architecture.md for the meaning of every column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npu_data.common.ragged import encode_texts, offsets_of, take_runs
from npu_data.common.ragged import ranges_index as ranges_index  # re-exported: shards.batch_read
from npu_data.kinds.registry import KINDS
from npu_data.kinds.relations import RELATION_DIRECTIONS as RELATION_DIRECTIONS  # re-export
from npu_data.kinds.scalars import SCALAR_KINDS as SCALAR_KINDS  # re-export

# Per-sample columns (text columns are listed in SAMPLE_TEXT).
SAMPLE_COLUMNS: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
    "task_id": (np.dtype("<i8"), ()),
    "width": (np.dtype("<i4"), ()),
    "height": (np.dtype("<i4"), ()),
}
SAMPLE_TEXT = ("image_ref", "data_json")

SOURCES = ("annotation", "prediction")


@dataclass
class AnnotationTable:
    """All annotations of an export as numpy columns (see the module docstring)."""

    num_samples: int
    columns: dict[str, np.ndarray]
    controls: list[str] = field(default_factory=list)
    labels: dict[str, list[str]] = field(default_factory=dict)

    # --- access -----------------------------------------------------------------------
    def rows(self, group: str, i: int) -> slice:
        """Row range of sample ``i`` in ``group``."""
        off = self.columns[f"{group}.offsets"]
        return slice(int(off[i]), int(off[i + 1]))

    def count(self, group: str) -> int:
        """Total rows in ``group``."""
        return int(self.columns[f"{group}.offsets"][-1])

    def text(self, name: str, row: int) -> str:
        """String ``row`` of text column ``name`` (e.g. ``image_ref`` or ``texts.text``)."""
        data = self.columns[f"{name}.bytes"]
        off = self.columns[f"{name}.offsets"]
        return bytes(data[int(off[row]) : int(off[row + 1])]).decode("utf-8")

    def texts(self, name: str, rows: slice | None = None) -> list[str]:
        """Strings of text column ``name`` (all rows, or a row range)."""
        off = self.columns[f"{name}.offsets"]
        n = len(off) - 1
        r = rows or slice(0, n)
        return [self.text(name, j) for j in range(*r.indices(n))]

    def label_name(self, control: int, label: int) -> str | None:
        """The label string of ``label`` under control index ``control`` (None for -1)."""
        if label < 0:
            return None
        return self.labels[self.controls[control]][label]

    # --- subsets -----------------------------------------------------------------------
    def select(self, indices: np.ndarray | list[int] | range) -> AnnotationTable:
        """A new table holding samples ``indices`` in that order (columns copied)."""
        idx = np.asarray(indices, dtype=np.int64)
        cols: dict[str, np.ndarray] = {}
        for name in SAMPLE_COLUMNS:
            cols[name] = self.columns[name][idx]
        for name in SAMPLE_TEXT:
            cols[f"{name}.bytes"], cols[f"{name}.offsets"] = take_runs(
                self.columns[f"{name}.bytes"], self.columns[f"{name}.offsets"], idx
            )
        for kind in KINDS:
            group = kind.name
            off = self.columns[f"{group}.offsets"]
            starts = off[idx]
            lengths = off[idx + 1] - starts
            rows = ranges_index(starts, lengths)
            cols[f"{group}.offsets"] = offsets_of(lengths)
            for name in kind.fixed:
                cols[f"{group}.{name}"] = self.columns[f"{group}.{name}"][rows]
            for name in kind.text:
                key = f"{group}.{name}"
                cols[f"{key}.bytes"], cols[f"{key}.offsets"] = take_runs(
                    self.columns[f"{key}.bytes"], self.columns[f"{key}.offsets"], rows
                )
            for nest in kind.nested:
                vals, offs = f"{group}.{nest.values}", f"{group}.{nest.offsets}"
                cols[vals], cols[offs] = take_runs(self.columns[vals], self.columns[offs], rows)
        return AnnotationTable(len(idx), cols, list(self.controls),
                               {k: list(v) for k, v in self.labels.items()})

    def validate(self) -> None:
        """Check that every column the schema names is present and consistent."""
        n = self.num_samples
        for name in SAMPLE_COLUMNS:
            if len(self.columns[name]) != n:
                raise ValueError(f"column {name} has {len(self.columns[name])} rows, expected {n}")
        for name in SAMPLE_TEXT:
            if len(self.columns[f"{name}.offsets"]) != n + 1:
                raise ValueError(f"text column {name} has wrong offsets length")
        for kind in KINDS:
            group = kind.name
            off = self.columns[f"{group}.offsets"]
            if len(off) != n + 1:
                raise ValueError(f"group {group} offsets length {len(off)}, expected {n + 1}")
            rows = int(off[-1])
            for name in kind.fixed:
                if len(self.columns[f"{group}.{name}"]) != rows:
                    raise ValueError(f"column {group}.{name} length mismatch")
            for name in kind.text:
                if len(self.columns[f"{group}.{name}.offsets"]) != rows + 1:
                    raise ValueError(f"text column {group}.{name} length mismatch")
            for nest in kind.nested:
                if len(self.columns[f"{group}.{nest.offsets}"]) != rows + 1:
                    raise ValueError(f"column {group}.{nest.offsets} length mismatch")


class TextColumnBuilder:
    """Accumulates strings into a text column (``common.ragged.encode_texts``)."""

    def __init__(self) -> None:
        self._strings: list[str] = []

    def append(self, value: str) -> None:
        self._strings.append(value)

    def __len__(self) -> int:
        return len(self._strings)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The column's UTF-8 bytes and offsets."""
        data, offsets = encode_texts(self._strings)
        return data.copy(), offsets  # writable, as the columns it joins


def empty_table(controls: list[str] | None = None,
                labels: dict[str, list[str]] | None = None) -> AnnotationTable:
    """A table of zero samples with every column of the schema."""
    cols: dict[str, np.ndarray] = {}
    for name, (dt, shape) in SAMPLE_COLUMNS.items():
        cols[name] = np.zeros((0, *shape), dtype=dt)
    for name in SAMPLE_TEXT:
        cols[f"{name}.bytes"] = np.zeros(0, np.uint8)
        cols[f"{name}.offsets"] = np.zeros(1, np.int64)
    for kind in KINDS:
        cols.update(kind.empty_columns())
    return AnnotationTable(0, cols, list(controls or []), dict(labels or {}))
