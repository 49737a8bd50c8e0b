"""A sample's annotation columns <-> the ``<key>.json`` of a WebDataset tar, in pixel
coordinates of the stored image (docs/format.md, "WebDataset tars").

Version 2 (written now) is columnar: per group one list per column, label and control ids
as integers into the sample's ``controls`` / ``labels`` maps, geometry as the shards store it
(float32 pixels, ``boxes.corners`` and ``boxes.xyxy`` included), so a reader builds each
column with one ``np.array`` call and gets the shard's values bit for bit. Version 1 (tars
written before, no ``version`` key: one dict per row, names instead of ids) still reads.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson

from npu_data.annotations.table import (
    GROUP_NESTED,
    GROUP_TEXT,
    GROUPS,
    RELATION_DIRECTIONS,
    SCALAR_KINDS,
    SOURCES,
    AnnotationTable,
    TextColumnBuilder,
)
from npu_data.kinds.boxes import box_pixels
from npu_data.shards.format import F32, PIXEL_COLUMNS

VERSION = 2
ENUMS = {"source": SOURCES, "direction": RELATION_DIRECTIONS, "kind": SCALAR_KINDS}
JSON_TEXT = frozenset({"taxonomy.path", "relations.labels"})  # texts that hold JSON
_SIZE = ("height", "width")  # masks.height / masks.width: the image's, not in the JSON
_DUMP = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS


def _spec(group: str) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """(name, dtype in a sample dict, trailing shape) of ``group``'s numeric JSON columns."""
    out = [(name, F32 if f"{group}.{name}" in PIXEL_COLUMNS else dt, shape)
           for name, (dt, shape) in GROUPS[group].items()
           if not (group == "masks" and name in _SIZE)]
    if group == "boxes":
        out += [("corners", F32, (4, 2)), ("xyxy", F32, (4,))]
    if group == "polygons":
        out += [("points", F32, (2,)), ("point_offsets", np.dtype("<i8"), ())]
    return out


SPEC = {group: _spec(group) for group in GROUPS}
# (JSON name, sample key, dtype, trailing shape) and the keys that count a group's rows
_COLUMNS = {g: [(n, f"{g}.{n}", d, s) for n, d, s in spec] for g, spec in SPEC.items()}
_ROW_KEYS = {g: [f"{g}.{n}" for n, _, _ in SPEC[g] if not n.startswith("point")]
             + [f"{g}.{n}" for n in GROUP_TEXT[g]] for g in GROUPS}


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared by every sample without rows (as read-only as mmaps)
    return a


_EMPTY_ARRAYS = {g: {k: _frozen(np.zeros((0, *s), d)) for _, k, d, s in _COLUMNS[g]}
                 | ({f"masks.{n}": _frozen(np.zeros(0, "<i4")) for n in _SIZE}
                    if g == "masks" else {})
                 | ({"polygons.point_offsets": _frozen(np.zeros(1, "<i8"))}
                    if g == "polygons" else {}) for g in GROUPS}
_EMPTY_LISTS = {g: [f"{g}.{n}" for n in GROUP_TEXT[g]] + (["masks.bits"] if g == "masks" else [])
                for g in GROUPS}


def _empty(group: str) -> dict[str, Any]:
    """The columns of a group without rows (fresh lists, shared read-only arrays)."""
    cols: dict[str, Any] = dict(_EMPTY_ARRAYS[group])
    for key in _EMPTY_LISTS[group]:
        cols[key] = []
    return cols


def _ALL_EMPTY() -> dict[str, Any]:  # noqa: N802
    return {k: v for group in GROUPS for k, v in _empty(group).items()}


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
    for group in kinds:
        if not len(s.get(f"{group}.control", ())):
            continue  # empty groups are left out
        g: dict[str, Any] = {name: np.ascontiguousarray(s[f"{group}.{name}"])
                             for name, _, _ in SPEC[group]}
        for name in GROUP_TEXT[group]:
            g[name] = list(s[f"{group}.{name}"])
        if group == "masks":
            g["bits"] = [base64.b64encode(np.packbits(m.reshape(-1)).tobytes()).decode("ascii")
                         for m in s["masks.mask"]]
        out[group] = g
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
    H, W = int(ann["height"]), int(ann["width"])
    cols: dict[str, Any] = {}
    kinds = ann.get("kinds", list(GROUPS))
    if not isinstance(kinds, list) or any(k not in GROUPS for k in kinds):
        raise ValueError(f"kinds {kinds!r}: not a list of {', '.join(GROUPS)}")
    for group in kinds:
        g = ann.get(group)
        if not g:
            cols.update(_empty(group))
            continue
        n = len(g["control"])
        for name, key, dt, shape in _COLUMNS[group]:
            cols[key] = np.array(g[name], dt).reshape(-1, *shape)
        for name in GROUP_TEXT[group]:
            texts = g[name]
            if not all(type(t) is str for t in texts):
                raise ValueError(f"{group}.{name}: not a list of strings")
            cols[f"{group}.{name}"] = texts
        if group == "masks":
            cols["masks.height"] = np.full(n, H, "<i4")
            cols["masks.width"] = np.full(n, W, "<i4")
            cols["masks.bits"] = [np.frombuffer(base64.b64decode(b), np.uint8) for b in g["bits"]]
        _check(group, n, cols, H * W)
    return cols


def _check(group: str, n: int, cols: dict[str, Any], pixels: int) -> None:
    """ValueError unless every column of ``group`` has ``n`` rows (and nested ones add up)."""
    for key in _ROW_KEYS[group]:
        if len(cols[key]) != n:
            raise ValueError(f"{key} has {len(cols[key])} rows, {group}.control has {n}")
    if group == "polygons":
        off = cols["polygons.point_offsets"]
        if len(off) != n + 1 or off[0] != 0 or off[-1] != len(cols["polygons.points"]) or (
                np.diff(off) < 0).any():
            raise ValueError("polygons.point_offsets does not match polygons.points")
    if group == "masks":
        if len(cols["masks.bits"]) != n or any(len(b) != (pixels + 7) // 8
                                               for b in cols["masks.bits"]):
            raise ValueError("masks.bits: a mask is not the image's size")


def _v1_columns(ann: dict[str, Any]) -> dict[str, Any]:
    """``sample_columns`` of a version-1 JSON (rows with names; pixel floats): the values the
    stream gave before version 2, ``boxes.corners``/``xyxy`` recomputed as it did."""
    controls, labels = label_maps([ann])
    H, W = int(ann["height"]), int(ann["width"])
    cols: dict[str, Any] = {}
    for group, fixed in GROUPS.items():
        rows = ann.get(group) or []
        if not rows:
            cols.update(_empty(group))
            continue
        for name, (dt, shape) in fixed.items():
            key = f"{group}.{name}"
            if group == "masks" and name in _SIZE:
                vals: list[Any] = [H if name == "height" else W] * len(rows)
            elif name == "control":
                vals = [-1 if r["control"] is None else controls.index(r["control"])
                        for r in rows]
            elif name == "label":
                vals = [-1 if r.get("label") is None else labels[r["control"]].index(r["label"])
                        for r in rows]
            elif name in ENUMS:
                vals = [ENUMS[name].index(r[name]) for r in rows]
            else:
                vals = [np.nan if r.get(name) is None else r[name] for r in rows]
            arr = np.array(vals, F32 if key in PIXEL_COLUMNS else dt).reshape(-1, *shape)
            cols[key] = arr
        for name in GROUP_TEXT[group]:
            key = f"{group}.{name}"
            cols[key] = [orjson.dumps(r[name]).decode() if key in JSON_TEXT else r[name]
                         for r in rows]
        if group == "boxes":  # as before: through percent of the JSON's size, float64
            pct = cols["boxes.xywhr"].astype(np.float64) * (100.0 / np.array([W, H, W, H, 100]))
            w, h = np.full(len(rows), float(W)), np.full(len(rows), float(H))
            cols["boxes.xywhr"], cols["boxes.corners"], cols["boxes.xyxy"] = box_pixels(pct, w, h)
        if group == "polygons":
            parts = [np.array(r["points"], np.float64).reshape(-1, 2) for r in rows]
            off = np.zeros(len(parts) + 1, np.int64)
            np.cumsum([len(p) for p in parts], out=off[1:])
            cols["polygons.points"] = np.concatenate(parts).astype(F32)
            cols["polygons.point_offsets"] = off
        if group == "masks":
            cols["masks.bits"] = [np.frombuffer(base64.b64decode(r["bits"]), np.uint8)
                                  for r in rows]
        _check(group, len(rows), cols, H * W)
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
        for g in GROUPS:
            for r in a.get(g) or []:
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
    for group, fixed in GROUPS.items():
        counts = np.array([len(c[f"{group}.control"]) for c in per], np.int64)
        cols[f"{group}.offsets"] = _offsets(counts)
        rows_w, rows_h = np.repeat(W, counts), np.repeat(H, counts)
        for name, (dt, shape) in fixed.items():
            key = f"{group}.{name}"
            arr = np.concatenate([c[key] for c in per]).astype(dt).reshape(-1, *shape)
            cols[key] = _percent(key, arr, rows_w, rows_h)
        for name in GROUP_TEXT[group]:
            key = f"{group}.{name}"
            cols[f"{key}.bytes"], cols[f"{key}.offsets"] = _texts(
                [t for c in per for t in c[key]])
        for _, offsets, dt, _ in GROUP_NESTED.get(group, ()):
            if group == "polygons":
                lengths = np.concatenate([np.diff(c["polygons.point_offsets"]) for c in per])
                pts = np.concatenate([c["polygons.points"] for c in per]).astype(np.float64)
                scale = 100.0 / np.stack([np.repeat(rows_w, lengths),
                                          np.repeat(rows_h, lengths)], axis=1)
                cols["polygons.points"] = (pts * scale).astype(dt)
            else:
                parts = [b for c in per for b in c["masks.bits"]]
                lengths = np.array([len(p) for p in parts], np.int64)
                cols["masks.bits"] = (np.concatenate(parts) if parts
                                      else np.zeros(0, dt)).astype(dt)
            cols[f"{group}.{offsets}"] = _offsets(lengths)
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
    for group in GROUPS:
        ctrl = cols[f"{group}.control"]
        if "label" in GROUPS[group]:
            lab = cols[f"{group}.label"]
            cols[f"{group}.label"] = np.array(
                [-1 if v < 0 else labels[mine[c]].index(my_labels[mine[c]][v])
                 for c, v in zip(ctrl.tolist(), lab.tolist(), strict=True)], "<i4")
        cols[f"{group}.control"] = cmap[ctrl]


def _percent(key: str, arr: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Pixel geometry column ``key`` of rows on images ``w`` x ``h`` in percent (float64)."""
    if key not in PIXEL_COLUMNS or not len(arr):
        return arr
    a = arr.astype(np.float64)
    if key in ("boxes.xywhr", "ellipses.params"):
        a[:, [0, 2]] *= (100.0 / w)[:, None]
        a[:, [1, 3]] *= (100.0 / h)[:, None]
    elif key == "keypoints.xy":
        a[:, 0] *= 100.0 / w
        a[:, 1] *= 100.0 / h
    elif key == "keypoints.size":
        a *= 100.0 / w
    return a


def _texts(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    tb = TextColumnBuilder()
    for v in strings:
        tb.append(v)
    return tb.finish()


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out
