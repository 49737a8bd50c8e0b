"""Chunk-wise accumulation of AnnotationTable columns (compact numpy pieces, joined once)."""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_data.annotations.table import AnnotationTable
from npu_data.common.ragged import concat_runs, encode_texts, offsets_of, take_runs
from npu_data.kinds.registry import BY_NAME


class Rows:
    """The rows one chunk adds to one group: fixed columns, text columns and nested values,
    each of the last two a ragged ``(values, offsets)`` pair (``common.ragged``)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.sample: np.ndarray = np.zeros(0, np.int64)
        self.slot: np.ndarray = np.zeros(0, np.int64)
        self.fixed: dict[str, np.ndarray] = {}
        self.text: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # UTF-8 bytes, offsets
        self.nested: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # values, offsets

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, mask: np.ndarray) -> Rows:
        """The rows where ``mask`` is true."""
        return self.pick(np.flatnonzero(mask))

    def pick(self, idx: np.ndarray) -> Rows:
        """Rows ``idx`` (int64 row numbers), in that order."""
        out = Rows(self.group)
        out.sample, out.slot = self.sample[idx], self.slot[idx]
        out.fixed = {k: v[idx] for k, v in self.fixed.items()}
        for store, src in ((out.text, self.text), (out.nested, self.nested)):
            for k, (vals, off) in src.items():
                store[k] = take_runs(vals, off, idx)
        return out


class GroupBuilder:
    """All rows of one group, as a list of chunk pieces."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.pieces: list[Rows] = []

    def add(self, rows: Rows) -> None:
        if len(rows):
            self.pieces.append(rows)

    def finish(self, num_samples: int, dead_slots: set[int]) -> dict[str, np.ndarray]:
        """Columns of the group, rows ordered by sample (stable), dead slots removed."""
        g = self.group
        kind = BY_NAME[g]
        cat = _concat(self.pieces, g)
        self.pieces = []
        keep = np.ones(len(cat), bool)
        if dead_slots:
            keep &= ~np.isin(cat.slot, np.fromiter(dead_slots, np.int64))
        order_needed = bool(len(cat.sample) > 1 and np.any(np.diff(cat.sample) < 0))
        if not keep.all():
            cat = cat.take(keep)
        if order_needed:
            cat = cat.pick(np.argsort(cat.sample, kind="stable"))
        cols: dict[str, np.ndarray] = {
            f"{g}.offsets": offsets_of(np.bincount(cat.sample, minlength=num_samples)[:num_samples])
        }
        for name, (dt, shape) in kind.fixed.items():
            col = cat.fixed.get(name)
            cols[f"{g}.{name}"] = (
                np.zeros((0, *shape), dt) if col is None else col.astype(dt, copy=False)
            )
        for name in kind.text:
            cols[f"{g}.{name}.bytes"], cols[f"{g}.{name}.offsets"] = cat.text.get(
                name, (np.zeros(0, np.uint8), np.zeros(len(cat) + 1, np.int64)))
        for nest in kind.nested:
            vals, off = cat.nested.get(nest.values, (np.zeros((0, *nest.shape), nest.dtype),
                                                     np.zeros(len(cat) + 1, np.int64)))
            cols[f"{g}.{nest.values}"] = vals.astype(nest.dtype, copy=False)
            cols[f"{g}.{nest.offsets}"] = off
        return cols


def _concat(pieces: list[Rows], group: str) -> Rows:
    out = Rows(group)
    if not pieces:
        return out
    out.sample = np.concatenate([p.sample for p in pieces])
    out.slot = np.concatenate([p.slot for p in pieces])
    for name in pieces[0].fixed:
        out.fixed[name] = np.concatenate([p.fixed[name] for p in pieces])
    for store, attr in ((out.text, "text"), (out.nested, "nested")):
        for name in getattr(pieces[0], attr):
            store[name] = concat_runs([getattr(p, attr)[name] for p in pieces])
    return out


class SampleBuilder:
    """Per-sample columns, chunk by chunk."""

    def __init__(self) -> None:
        self.task_id: list[np.ndarray] = []
        self.width: list[np.ndarray] = []
        self.height: list[np.ndarray] = []
        self.text: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"image_ref": [],
                                                                     "data_json": []}
        self.count = 0

    def add(self, task_id: list[int], width: list[int], height: list[int],
            image_ref: list[str], data_json: list[bytes]) -> None:
        self.task_id.append(np.asarray(task_id, np.int64))
        self.width.append(np.asarray(width, np.int32))
        self.height.append(np.asarray(height, np.int32))
        self.text["image_ref"].append(encode_texts(image_ref))
        self.text["data_json"].append(
            (np.frombuffer(b"".join(data_json), np.uint8),
             offsets_of(np.fromiter(map(len, data_json), np.int64, count=len(data_json))))
        )
        self.count += len(task_id)

    def finish(self, late_sizes: dict[int, tuple[int, int]]) -> dict[str, Any]:
        cols: dict[str, Any] = {}
        for name, parts, dt in (("task_id", self.task_id, np.int64),
                                ("width", self.width, np.int32),
                                ("height", self.height, np.int32)):
            cols[name] = np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)
        for i, (w, h) in late_sizes.items():
            if cols["width"][i] == 0:
                cols["width"][i], cols["height"][i] = w, h
        for name, tparts in self.text.items():
            cols[f"{name}.bytes"], cols[f"{name}.offsets"] = concat_runs(tparts) if tparts else (
                np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return cols


def build_table(samples: SampleBuilder, groups: dict[str, GroupBuilder],
                dead_slots: set[int], late_sizes: dict[int, tuple[int, int]],
                controls: list[str], labels: dict[str, list[str]]) -> AnnotationTable:
    """Join every piece into an AnnotationTable."""
    n = samples.count
    cols = samples.finish(late_sizes)
    for b in groups.values():
        cols.update(b.finish(n, dead_slots))
    table = AnnotationTable(n, cols, controls, labels)
    table.validate()
    return table
