"""WebDataset tars <-> our shards: ``<key>.<png|jpg|...>`` image + ``<key>.json`` annotations.

The JSON holds pixel coordinates of the stored image, label names (with the dataset's label
map and controls so ids are reproducible), texts, and masks as base64 ``np.packbits``.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import orjson
from PIL import Image

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
from npu_data.common.atomic import fsync_dir
from npu_data.errors import UserError
from npu_data.shards.format import ENC_JPEG, ENC_PNG, ENC_RAW, PIXEL_COLUMNS

_ENUMS = {"source": SOURCES, "direction": RELATION_DIRECTIONS, "kind": SCALAR_KINDS}
_JSON_TEXT = {"taxonomy.path", "relations.labels"}
_EXT = {ENC_JPEG: "jpg", ENC_PNG: "png"}


class WdsSample(NamedTuple):
    """One WebDataset sample: key, image file bytes, annotations dict (``image_ext`` inside)."""

    key: str
    image: bytes
    annotations: dict[str, Any]


# ------------------------------------------------------------------ sample <-> JSON
def sample_json(s: dict[str, Any], controls: list[str], labels: dict[str, list[str]],
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-ready annotations of a ShardDataset sample dict ``s``."""
    h, w = s["image"].shape[:2]
    out: dict[str, Any] = {"task_id": int(s["task_id"]), "index": int(s["index"]),
                           "width": int(w), "height": int(h), "controls": controls,
                           "labels": labels, "caption": s.get("caption", "")}
    out.update(extra or {})
    for group, fixed in GROUPS.items():
        n = len(s[f"{group}.control"])
        rows: list[dict[str, Any]] = [{} for _ in range(n)]
        for name in fixed:
            key = f"{group}.{name}"
            col = s[key]
            for j in range(n):
                v = col[j]
                if name == "control":
                    rows[j][name] = controls[int(v)] if int(v) >= 0 else None
                elif name == "label":
                    c = controls[int(s[f"{group}.control"][j])]
                    rows[j][name] = labels[c][int(v)] if int(v) >= 0 else None
                elif name in _ENUMS:
                    rows[j][name] = _ENUMS[name][int(v)]
                elif key in PIXEL_COLUMNS or np.asarray(v).dtype.kind == "f":
                    arr = np.asarray(v, np.float64)
                    rows[j][name] = None if arr.ndim == 0 and np.isnan(arr) else arr.tolist()
                else:
                    rows[j][name] = np.asarray(v).tolist()
        for name in GROUP_TEXT[group]:
            for j, t in enumerate(s[f"{group}.{name}"]):
                rows[j][name] = orjson.loads(t) if f"{group}.{name}" in _JSON_TEXT else t
        if group == "polygons":
            pts, off = s["polygons.points"], s["polygons.point_offsets"]
            for j in range(n):
                rows[j]["points"] = np.asarray(pts[off[j]:off[j + 1]], np.float64).tolist()
        if group == "masks":
            for j in range(n):
                rows[j].pop("height", None)
                rows[j].pop("width", None)
                rows[j]["bits"] = base64.b64encode(
                    np.packbits(s["masks.mask"][j].reshape(-1)).tobytes()).decode("ascii")
        out[group] = rows
    return out


def _label_maps(anns: list[dict[str, Any]]) -> tuple[list[str], dict[str, list[str]]]:
    controls: list[str] = []
    labels: dict[str, list[str]] = {}
    for a in anns:
        for c in a.get("controls", []):
            if c not in controls:
                controls.append(c)
        for c, names in a.get("labels", {}).items():
            lst = labels.setdefault(c, [])
            lst.extend(x for x in names if x not in lst)
    return controls, labels


def table_from_json(anns: list[dict[str, Any]], image_refs: list[str]) -> AnnotationTable:
    """An AnnotationTable (percent coordinates) from the JSON of :func:`sample_json`."""
    controls, labels = _label_maps(anns)
    for a in anns:
        for g in GROUPS:
            for r in a.get(g, []):
                if r["control"] is not None and r["control"] not in controls:
                    controls.append(r["control"])
    n = len(anns)
    W = np.array([a["width"] for a in anns], np.float64)
    H = np.array([a["height"] for a in anns], np.float64)
    cols: dict[str, np.ndarray] = {
        "task_id": np.array([a["task_id"] for a in anns], "<i8"),
        "width": W.astype("<i4"), "height": H.astype("<i4")}
    for name, strings in (("image_ref", image_refs),
                          ("data_json", [orjson.dumps(a.get("data", {})).decode() for a in anns])):
        tb = TextColumnBuilder()
        for v in strings:
            tb.append(v)
        cols[f"{name}.bytes"], cols[f"{name}.offsets"] = tb.finish()
    for group, fixed in GROUPS.items():
        per = [a.get(group, []) for a in anns]
        off = np.zeros(n + 1, np.int64)
        np.cumsum([len(p) for p in per], out=off[1:])
        cols[f"{group}.offsets"] = off
        rows = [(i, r) for i, p in enumerate(per) for r in p]
        for name, (dt, shape) in fixed.items():
            vals: list[Any] = []
            for i, r in rows:
                if name == "control":
                    c = r["control"]
                    vals.append(-1 if c is None else controls.index(c))
                elif name == "label":
                    lab = r.get("label")
                    vals.append(-1 if lab is None else labels[r["control"]].index(lab))
                elif name in _ENUMS:
                    vals.append(_ENUMS[name].index(r[name]))
                elif group == "masks" and name in ("height", "width"):
                    vals.append(anns[i][name])
                else:
                    v = r.get(name)
                    vals.append(np.nan if v is None else v)
            arr = np.array(vals, dtype=dt).reshape(-1, *shape)
            key = f"{group}.{name}"
            if key in PIXEL_COLUMNS and len(rows):
                w = np.array([W[i] for i, _ in rows])
                h = np.array([H[i] for i, _ in rows])
                arr = _to_percent(key, arr, w, h)
            cols[key] = arr
        for name in GROUP_TEXT[group]:
            tb = TextColumnBuilder()
            for _, r in rows:
                v = r[name]
                tb.append(orjson.dumps(v).decode() if f"{group}.{name}" in _JSON_TEXT else v)
            cols[f"{group}.{name}.bytes"], cols[f"{group}.{name}.offsets"] = tb.finish()
        for values, offsets, dt, shape in GROUP_NESTED.get(group, ()):
            if group == "polygons":
                parts = [np.array(r["points"], np.float64).reshape(-1, 2)
                         * (100.0 / np.array([W[i], H[i]])) for i, r in rows]
            else:
                parts = [np.frombuffer(base64.b64decode(r["bits"]), np.uint8) for _, r in rows]
            lengths = np.array([len(p) for p in parts], np.int64)
            o = np.zeros(len(parts) + 1, np.int64)
            np.cumsum(lengths, out=o[1:])
            cols[f"{group}.{offsets}"] = o
            cols[f"{group}.{values}"] = (np.concatenate(parts).astype(dt) if parts
                                         else np.zeros((0, *shape), dt))
    table = AnnotationTable(n, cols, controls, labels)
    table.validate()
    return table


def _to_percent(key: str, arr: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    a = arr.astype(np.float64).copy()
    if key == "boxes.xywhr":
        a[:, [0, 2]] *= (100.0 / w)[:, None]
        a[:, [1, 3]] *= (100.0 / h)[:, None]
    elif key == "keypoints.xy":
        a[:, 0] *= 100.0 / w
        a[:, 1] *= 100.0 / h
    elif key == "keypoints.size":
        a *= 100.0 / w
    elif key == "ellipses.params":
        a[:, [0, 2]] *= (100.0 / w)[:, None]
        a[:, [1, 3]] *= (100.0 / h)[:, None]
    return a


# ------------------------------------------------------------------ writing tars
def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o444
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def _image_bytes(ds: Any, i: int, s: dict[str, Any]) -> tuple[bytes, str]:
    k, j = ds.locate(i)
    sh = ds.shard(k)
    rec = sh.index[j]
    enc = int(rec["encoding"])
    if enc == ENC_RAW or enc not in _EXT:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(s["image"])).save(buf, "PNG", compress_level=6)
        return buf.getvalue(), "png"
    off, n = int(rec["offset"]), int(rec["length"])
    return sh.data[off:off + n].tobytes(), _EXT[enc]


def export_wds(dataset: str | os.PathLike[str], pattern: str, maxcount: int = 10000,
               maxsize: int = 1 << 30) -> list[Path]:
    """Write dataset folder ``dataset`` as tars named ``pattern % shard_number``."""
    from npu_data.progress import progress
    from npu_data.shards.reader import ShardDataset

    if "%" not in pattern:
        raise UserError(f"--out {pattern}: needs a shard number, e.g. 'train-%06d.tar'")
    if maxcount < 1 or maxsize < 1:
        raise UserError("--maxcount and --maxsize must be at least 1")
    ds = ShardDataset(dataset)
    written: list[Path] = []
    tar: tarfile.TarFile | None = None
    fh: IO[bytes] | None = None
    tmp = ""
    count = size = 0

    def close() -> None:
        nonlocal tar, fh
        if tar is None or fh is None:
            return
        tar.close()
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        target = Path(pattern % len(written))
        os.replace(tmp, target)
        fsync_dir(target.parent)
        written.append(target)
        tar = fh = None

    try:
        for i in progress(range(len(ds)), total=len(ds), desc="export-wds", unit="sample"):
            s = ds[i]
            img, ext = _image_bytes(ds, i, s)
            meta = orjson.dumps(sample_json(s, ds.controls, ds.labels, {
                "image_ext": ext, "data": orjson.loads(_text(ds, i, "data_json") or "{}"),
                "image_ref": _text(ds, i, "image_ref")}), option=orjson.OPT_SORT_KEYS)
            if tar is not None and (count >= maxcount or size + len(img) + len(meta) > maxsize):
                close()
            if tar is None:
                target = Path(pattern % len(written))
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part",
                                           dir=target.parent)
                fh = os.fdopen(fd, "wb")
                tar = tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT)
                count = size = 0
            key = f"{int(s['index']):09d}"
            _add(tar, f"{key}.{ext}", img)
            _add(tar, f"{key}.json", meta)
            count += 1
            size += len(img) + len(meta) + 2048
        close()
    except BaseException:
        if fh is not None:
            fh.close()
            Path(tmp).unlink(missing_ok=True)
        raise
    return written


def _text(ds: Any, i: int, name: str) -> str:
    k, j = ds.locate(i)
    sh = ds.shard(k)
    off = sh.col(f"{name}.offsets")
    return bytes(sh.col(f"{name}.bytes")[int(off[j]):int(off[j + 1])]).decode("utf-8")


# ------------------------------------------------------------------ reading tars
def open_stream(url: str) -> IO[bytes]:
    """A binary stream of a local path or an http(s) URL."""
    if url.startswith(("http://", "https://")):
        try:
            return urllib.request.urlopen(url, timeout=60)  # noqa: S310
        except OSError as exc:
            raise UserError(f"{url}: cannot open ({exc}) — check the URL") from None
    try:
        return open(url, "rb")
    except OSError as exc:
        raise UserError(f"{url}: cannot open ({exc.strerror}) — check the path") from None


def iter_tar_samples(url: str) -> Iterator[WdsSample]:
    """Samples of one tar in order (members grouped by key = name up to the first dot)."""
    with open_stream(url) as stream:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|*")
        except tarfile.TarError as exc:
            raise UserError(f"{url}: not a tar file ({exc})") from None
        key: str | None = None
        parts: dict[str, bytes] = {}
        try:
            for m in tar:
                if not m.isfile():
                    continue
                base = m.name.rsplit("/", 1)[-1]
                k, _, ext = base.partition(".")
                f = tar.extractfile(m)
                data = f.read() if f is not None else b""
                if key is not None and k != key:
                    yield _make(url, key, parts)
                    parts = {}
                key = k
                parts[ext] = data
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise UserError(f"{url}: tar cut off or corrupt ({exc}) — export it again") from None
        if key is not None:
            yield _make(url, key, parts)


def _make(url: str, key: str, parts: dict[str, bytes]) -> WdsSample:
    if "json" not in parts:
        raise UserError(f"{url}: sample {key} has no .json annotations — write it with "
                        "`npu-data export-wds`")
    ann = orjson.loads(parts["json"])
    ext = ann.get("image_ext") or next((e for e in parts if e != "json"), None)
    if ext is None or ext not in parts:
        raise UserError(f"{url}: sample {key} has no image file")
    ann["image_ext"] = ext
    return WdsSample(key, parts[ext], ann)


def read_wds_samples(paths: Iterable[str]) -> Iterator[WdsSample]:
    """Every sample of the tars ``paths`` (local paths or http URLs), in order."""
    for p in paths:
        yield from iter_tar_samples(str(p))


def wds_to_table(paths: Iterable[str], media_dir: str | os.PathLike[str]) -> AnnotationTable:
    """Extract the images of ``paths`` into ``media_dir`` and build the table to import.

    ``image_ref`` of each row is the absolute path of its extracted image file, so the
    writer's image resolution reads it back byte for byte.
    """
    from npu_data.common.atomic import atomic_write_bytes

    media = Path(media_dir).resolve()
    anns: list[dict[str, Any]] = []
    refs: list[str] = []
    for n, smp in enumerate(read_wds_samples(paths)):
        path = media / f"{n:09d}-{smp.key}.{smp.annotations['image_ext']}"
        if not path.is_file() or path.stat().st_size != len(smp.image):
            atomic_write_bytes(path, smp.image)
        anns.append(smp.annotations)
        refs.append(str(path))
    if not anns:
        raise UserError("no WebDataset samples found in the given tars")
    return table_from_json(anns, refs)
