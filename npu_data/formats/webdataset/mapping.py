"""A sample's annotation columns <-> the ``<key>.json`` of a WebDataset tar, in pixel
coordinates of the stored image (docs/format.md, "WebDataset tars").

Version 2 (written now) is columnar: per group one list per column, label and control ids
as integers into the sample's ``controls`` / ``labels`` maps, geometry as the shards store it
(float32 pixels, ``boxes.corners`` and ``boxes.xyxy`` included), so a reader builds each
column with one ``np.array`` call and gets the shard's values bit for bit. Version 1 (tars
written before, no ``version`` key: one dict per row, names instead of ids) still reads.
Each kind's part is its module's (``Kind.json_*`` hooks); this module iterates the registry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from npu_data.annotations.table import (
    RELATION_DIRECTIONS,
    SCALAR_KINDS,
    SOURCES,
    AnnotationTable,
    TextColumnBuilder,
)
from npu_data.common.ragged import offsets_of
from npu_data.kinds.base import F32, Kind
from npu_data.kinds.registry import BY_NAME, KINDS

VERSION = 2
ENUMS = {"source": SOURCES, "direction": RELATION_DIRECTIONS, "kind": SCALAR_KINDS}
_DUMP = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS
_EMPTY = {k.name: k.json_empty() for k in KINDS}  # arrays shared read-only, lists copied


def _empty(kind: Kind) -> dict[str, Any]:
    """The columns of a kind without rows (fresh lists, shared read-only arrays)."""
    return {k: [] if isinstance(v, list) else v for k, v in _EMPTY[kind.name].items()}


def _ALL_EMPTY() -> dict[str, Any]:  # noqa: N802
    return {k: v for kind in KINDS for k, v in _empty(kind).items()}


# ------------------------------------------------------------------------------ writing
def sample_json(s: dict[str, Any], controls: list[str], labels: dict[str, list[str]],
                kinds: list[str], extra: dict[str, Any] | None = None) -> bytes:
    """The version-2 JSON of a ShardDataset sample dict ``s`` of a dataset with rows of
    ``kinds`` (the groups its samples carry; ``extra``: more keys)."""
    h, w = s["image"].shape[:2]
    out: dict[str, Any] = {"version": VERSION, "task_id": int(s["task_id"]),
                           "index": int(s["index"]), "width": int(w), "height": int(h),
                           "controls": controls, "labels": labels, "kinds": kinds,
                           "caption": s.get("caption", ""), **(extra or {})}
    for name in kinds:
        if len(s.get(f"{name}.control", ())):  # empty groups are left out
            out[name] = BY_NAME[name].json_part(s)
    return orjson.dumps(out, option=_DUMP)


# ------------------------------------------------------------------------------ reading
def sample_columns(ann: dict[str, Any]) -> dict[str, Any]:
    """The columns of one sample's JSON (either version) as ShardDataset holds them: numeric
    columns in the shard dtypes, pixel geometry, texts as lists of str, mask bits packed
    (``masks.bits``: one uint8 array per mask). ValueError/KeyError/TypeError if malformed."""
    version = ann.get("version", 1)
    if version == 1:
        return _v1_columns(ann)
    if version != VERSION:
        raise ValueError(f"annotations version {version!r}: this npu-data reads versions 1 "
                         f"and {VERSION} — upgrade npu-data")
    hw = int(ann["height"]), int(ann["width"])
    cols: dict[str, Any] = {}
    kinds = ann.get("kinds", list(BY_NAME))
    if not isinstance(kinds, list) or any(k not in BY_NAME for k in kinds):
        raise ValueError(f"kinds {kinds!r}: not a list of {', '.join(BY_NAME)}")
    for name in kinds:
        kind, g = BY_NAME[name], ann.get(name)
        cols.update(kind.json_read(g, hw) if g else _empty(kind))
        if g:
            _check_ids(ann, cols, kind)
    return cols


def _check_ids(ann: dict[str, Any], cols: dict[str, Any], kind: Kind) -> None:
    """ValueError unless every control id of ``kind``'s rows is one of the sample's
    ``controls`` (or -1) and every label id one of that control's ``labels`` (or -1)."""
    controls, labels = ann.get("controls", []), ann.get("labels", {})
    if not isinstance(controls, list) or not isinstance(labels, dict):
        raise ValueError("controls / labels: not a list / an object")
    ctrl = np.asarray(cols[f"{kind.name}.control"], np.int64).reshape(-1)
    bad = np.flatnonzero((ctrl < -1) | (ctrl >= len(controls)))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"{kind.name} row {j}: control id {int(ctrl[j])} is not one of the "
                         f"sample's {len(controls)} controls")
    if "label" not in kind.fixed:
        return
    sizes = np.array([len(labels.get(c, ())) for c in controls] + [0], np.int64)
    lab = np.asarray(cols[f"{kind.name}.label"], np.int64).reshape(-1)
    bad = np.flatnonzero((lab < -1) | (lab >= sizes[ctrl]))  # control -1: sizes[-1] = 0
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"{kind.name} row {j}: label id {int(lab[j])} is not one of the "
                         f"{int(sizes[ctrl[j]])} labels of its control")


def _v1_columns(ann: dict[str, Any]) -> dict[str, Any]:
    """``sample_columns`` of a version-1 JSON (rows with names; pixel floats): the values the
    stream gave before version 2 (every kind's columns)."""
    controls, labels = label_maps([ann])
    hw = int(ann["height"]), int(ann["width"])
    cols: dict[str, Any] = {}
    for kind in KINDS:
        rows = ann.get(kind.name) or []
        if not rows:
            cols.update(_empty(kind))
            continue
        numeric = {c for c, _, _ in kind.json_columns()}
        for name, (dt, shape) in kind.fixed.items():
            if name not in numeric:
                continue
            if name == "control":
                vals: list[Any] = [-1 if r["control"] is None else controls.index(r["control"])
                                   for r in rows]
            elif name == "label":
                vals = [-1 if r.get("label") is None else labels[r["control"]].index(r["label"])
                        for r in rows]
            elif name in ENUMS:
                vals = [ENUMS[name].index(r[name]) for r in rows]
            elif name in kind.added:  # version-1 rows were written before it existed
                vals = [kind.added[name]] * len(rows)
            else:
                vals = [np.nan if r.get(name) is None else r[name] for r in rows]
            cols[f"{kind.name}.{name}"] = np.array(
                vals, F32 if name in kind.pixel else dt).reshape(-1, *shape)
        for name in kind.text:
            cols[f"{kind.name}.{name}"] = [orjson.dumps(r[name]).decode()
                                           if name in kind.json_text else r[name] for r in rows]
        kind.json_v1(cols, rows, hw)
        kind.json_check(cols, len(rows), hw)
    return cols


def label_maps(anns: list[dict[str, Any]]) -> tuple[list[str], dict[str, list[str]]]:
    """The union of the label maps of sample JSONs (and the controls version-1 rows name)."""
    controls: list[str] = []
    labels: dict[str, list[str]] = {}
    for a in anns:
        for c in a.get("controls", []):
            if c not in controls:
                controls.append(c)
        for c, names in a.get("labels", {}).items():
            lst = labels.setdefault(c, [])
            lst.extend(x for x in names if x not in lst)
        if a.get("version", 1) != 1:
            continue  # version 2 rows hold ids into these maps
        for kind in KINDS:
            for r in a.get(kind.name) or []:
                if r["control"] is not None and r["control"] not in controls:
                    controls.append(r["control"])
    return controls, labels


# ------------------------------------------------------------------------------ tables
def table_from_json(anns: list[dict[str, Any]], image_refs: list[str]) -> AnnotationTable:
    """An AnnotationTable (percent coordinates, as imports hold them) of sample JSONs of
    either version; each column is built once for all samples. Label ids are mapped onto
    the union of the samples' label maps."""
    controls, labels = label_maps(anns)
    n = len(anns)
    W = np.array([a["width"] for a in anns], np.float64)
    H = np.array([a["height"] for a in anns], np.float64)
    per = [{**_ALL_EMPTY(), **sample_columns(a)} for a in anns]
    for a, c in zip(anns, per, strict=True):
        _remap(a, c, controls, labels)
    cols: dict[str, np.ndarray] = {"task_id": np.array([a["task_id"] for a in anns], "<i8"),
                                   "width": W.astype("<i4"), "height": H.astype("<i4")}
    for name, strings in (("image_ref", image_refs),
                          ("data_json", [orjson.dumps(a.get("data", {})).decode() for a in anns])):
        cols[f"{name}.bytes"], cols[f"{name}.offsets"] = _texts(strings)
    for kind in KINDS:
        g = kind.name
        counts = np.array([len(c[f"{g}.control"]) for c in per], np.int64)
        cols[f"{g}.offsets"] = offsets_of(counts)
        rows_w, rows_h = np.repeat(W, counts), np.repeat(H, counts)
        for name, (dt, shape) in kind.fixed.items():
            arr = np.concatenate([c[f"{g}.{name}"] for c in per]).astype(dt).reshape(-1, *shape)
            if name in kind.pixel and len(arr):
                arr = kind.to_percent(name, arr.astype(np.float64), rows_w, rows_h)
            cols[f"{g}.{name}"] = arr
        for name in kind.text:
            cols[f"{g}.{name}.bytes"], cols[f"{g}.{name}.offsets"] = _texts(
                [t for c in per for t in c[f"{g}.{name}"]])
        cols.update(kind.table_nested(per, rows_w, rows_h))
    table = AnnotationTable(n, cols, controls, labels)
    table.validate()
    return table


def _remap(ann: dict[str, Any], cols: dict[str, Any], controls: list[str],
           labels: dict[str, list[str]]) -> None:
    """Map a sample's control/label ids from its own maps onto ``controls`` / ``labels``."""
    if ann.get("version", 1) == 1:
        mine, my_labels = label_maps([ann])
    else:
        mine, my_labels = list(ann.get("controls", [])), dict(ann.get("labels", {}))
    if mine == controls[:len(mine)] and all(
            my_labels.get(c, []) == labels.get(c, [])[:len(my_labels.get(c, []))] for c in mine):
        return  # ids already mean the same (the usual case: one dataset's tars)
    cmap = np.array([controls.index(c) for c in mine] + [-1], np.int16)
    for kind in KINDS:
        group = kind.name
        ctrl = cols[f"{group}.control"]
        if "label" in kind.fixed:
            lab = cols[f"{group}.label"]
            cols[f"{group}.label"] = np.array(
                [-1 if v < 0 else labels[mine[c]].index(my_labels[mine[c]][v])
                 for c, v in zip(ctrl.tolist(), lab.tolist(), strict=True)], "<i4")
        cols[f"{group}.control"] = cmap[ctrl]


def _texts(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    tb = TextColumnBuilder()
    for v in strings:
        tb.append(v)
    return tb.finish()

