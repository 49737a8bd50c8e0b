"""The manifest schema (format version 1), validated before anything uses a manifest.

``validate_manifest`` checks a parsed ``manifest.json`` — local or fetched from a bucket —
before a single path is built from it: the keys and their types, every shard and file name a
single safe path component (``common.paths.safe_name``), no shard listed twice, the files a
shard must have (``data.bin``, ``index.npy``, the column files of the kinds with rows), sizes
and digests well formed, the ``samples`` totals adding up, each shard's ``samples`` exactly
what its ``index.npy`` holds and within what its offsets files can hold (their sizes). What only the files
themselves can show (exact row counts, dtypes, shapes, offsets) ``shards.file_checks`` verifies
when a shard is opened. Errors are one-line ``DataCorruption`` s naming the manifest and the
key (docs/format.md, "Validation").
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any, NoReturn

import orjson
from numpy.lib import format as npy_format

from npu_data.annotations.table import SAMPLE_TEXT
from npu_data.common.paths import inside, read_regular, unsafe_reason
from npu_data.errors import DataCorruption, UserError
from npu_data.kinds.registry import KINDS
from npu_data.shards.format import (
    ALIGN,
    DATA,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
    STORES,
    column_file,
    column_schema,
)

MAX_MANIFEST_BYTES = 256 << 20  # a manifest larger than this is refused before parsing
MAX_INT = 1 << 62  # sizes and counts above this are not from a real dataset
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NPY_HEADER = (16, 4096)  # bytes an .npy header of our columns takes, at least / at most
FIX = "the manifest is damaged or was not written by `npu-data import` — import (or upload) " \
      "the dataset again"


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key: str, why: str, fix: str = FIX) -> NoReturn:
        raise DataCorruption(f"{self.where}: {key} {why} — {fix}")

    def typed(self, value: Any, types: type | tuple[type, ...], key: str, what: str) -> Any:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in (
                types if isinstance(types, tuple) else (types,))):
            self.fail(key, f"is {_shown(value)}, not {what}")
        return value

    def count(self, value: Any, key: str, low: int = 0) -> int:
        self.typed(value, int, key, "an integer")
        if not low <= value <= MAX_INT:
            self.fail(key, f"is {value}, not an integer from {low} up")
        return int(value)

    def strings(self, value: Any, key: str) -> list[str]:
        self.typed(value, list, key, "a list of strings")
        for i, v in enumerate(value):
            self.typed(v, str, f"{key}[{i}]", "a string")
        return list(value)

    def name(self, value: Any, key: str) -> str:
        why = unsafe_reason(value)
        if why is not None:
            self.fail(key, f"{_shown(value)} {why}",
                      "refused: a name in a manifest must be one plain file name (the dataset "
                      "is damaged or hostile; do not use it)")
        return str(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """``manifest`` (parsed JSON) when it is a valid version-1 manifest; else a one-line
    ``DataCorruption`` (``UserError`` for a newer format) naming ``where`` and the key."""
    c = _Checker(where)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise UserError(f"{where}: not an npu-data shard manifest — point at a folder made by "
                        "`npu-data import`")
    version = c.count(manifest.get("version"), "version", 1)
    if version > FORMAT_VERSION:
        raise UserError(f"{where}: format version {version} is newer than this npu-data reads "
                        f"({FORMAT_VERSION}) — upgrade npu-data")
    for key in ("store", "controls", "labels", "shards", "counts"):
        if key not in manifest:
            c.fail(key, "is missing")
    if manifest["store"] not in STORES:
        c.fail("store", f"is {_shown(manifest['store'])}, not one of {', '.join(STORES)}")
    if manifest["store"] == "latents":
        from npu_data.shards.latent_format import record_problem

        why = record_problem(manifest.get("latents"))
        if why is not None:
            c.fail("latents", why)
    c.strings(manifest["controls"], "controls")
    labels = c.typed(manifest["labels"], dict, "labels", "an object")
    for control, label_names in labels.items():
        c.strings(label_names, f"labels[{control!r}]")
    kinds = manifest.get("kinds")
    if kinds is not None:
        c.strings(kinds, "kinds")
        if len(set(kinds)) != len(kinds):
            c.fail("kinds", "lists a kind twice")
    _check_layout(c, manifest)
    shards = c.typed(manifest["shards"], list, "shards", "a list")
    names: set[str] = set()
    total = 0
    for k, entry in enumerate(shards):
        name = _check_shard(c, entry, f"shards[{k}]", kinds)
        if name in names:
            c.fail(f"shards[{k}].name", f"{name!r} is listed twice (its samples would be "
                   "served twice)")
        names.add(name)
        total += entry["samples"]
    counts = c.typed(manifest["counts"], dict, "counts", "an object")
    for key, value in counts.items():
        c.count(value, f"counts.{key}")
    if counts.get("samples") != total:
        c.fail("counts.samples", f"is {_shown(counts.get('samples'))}, the shards hold {total}")
    if "shards" in counts and counts["shards"] != len(shards):
        c.fail("counts.shards", f"is {counts['shards']}, the manifest lists {len(shards)}")
    return manifest


def _check_layout(c: _Checker, m: dict[str, Any]) -> None:
    """The optional keys that describe the layout: when present, this version's."""
    if "byteorder" in m and m["byteorder"] != "little":
        c.fail("byteorder", f"is {_shown(m['byteorder'])}, not 'little'")
    if "align" in m and m["align"] != ALIGN:
        c.fail("align", f"is {_shown(m['align'])}, not {ALIGN}")
    if "index_dtype" in m and m["index_dtype"] != [[n, INDEX_DTYPE[n].str]
                                                    for n in INDEX_DTYPE.names or ()]:
        c.fail("index_dtype", "is not the index layout of format version 1")
    if "shard_size" in m:
        c.count(m["shard_size"], "shard_size", 1)
    for key in ("source_sha256", "table_sha256"):
        if m.get(key) is not None:
            c.typed(m[key], str, key, "a string")
    if "options" in m:
        c.typed(m["options"], dict, "options", "an object")
    if "columns" in m:
        ours = column_schema()
        cols = c.typed(m["columns"], dict, "columns", "an object")
        for col, spec in cols.items():
            if col in ours and spec != ours[col]:
                c.fail(f"columns[{col!r}]", f"is {_shown(spec)}, this version stores "
                       f"{ours[col]}")


def _required(kinds: list[str] | None) -> list[str]:
    """The column files every shard of a dataset with ``kinds`` (None: unknown) must list."""
    wanted = [k for k in KINDS if kinds is None or k.name in kinds]
    cols = [c for k in wanted for c in k.stored_columns()
            if c.split(".", 1)[1] not in k.added]  # added later: absent from older shards
    cols += [f"{t}.{part}" for t in SAMPLE_TEXT for part in ("bytes", "offsets")]
    return [column_file(c) for c in cols]


def _check_shard(c: _Checker, entry: Any, key: str, kinds: list[str] | None) -> str:
    c.typed(entry, dict, key, "an object")
    for field in ("name", "samples", "files"):
        if field not in entry:
            c.fail(f"{key}.{field}", "is missing")
    name = c.name(entry["name"], f"{key}.name")
    samples = c.count(entry["samples"], f"{key}.samples")
    if "tasks" in entry:
        tasks = c.typed(entry["tasks"], list, f"{key}.tasks", "a [first, end] pair")
        if len(tasks) != 2 or not all(isinstance(t, int) and not isinstance(t, bool)
                                      for t in tasks) or not 0 <= tasks[0] <= tasks[1]:
            c.fail(f"{key}.tasks", f"is {_shown(tasks)}, not a [first, end] pair")
        if samples > tasks[1] - tasks[0]:
            c.fail(f"{key}.samples", f"is {samples}, more than its {tasks[1] - tasks[0]} tasks")
    files = c.typed(entry["files"], dict, f"{key}.files", "an object")
    schema = column_schema()
    for fname, meta in files.items():
        where = f"{key}.files[{_shown(fname)}]"
        c.name(fname, where)
        if fname not in (DATA, INDEX) and not (fname.startswith("ann.")
                                               and fname.endswith(".npy")):
            c.fail(where, "is not a file of a version-1 shard (data.bin, index.npy, "
                   "ann.<column>.npy)")
        c.typed(meta, dict, where, "an object")
        c.count(meta.get("size"), f"{where}.size")
        sha = meta.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            c.fail(f"{where}.sha256", f"is {_shown(sha)}, not a sha256 hex digest")
    for fname in (DATA, INDEX, *_required(kinds)):
        if fname not in files:
            c.fail(f"{key}.files", f"has no {fname}")
    if files[DATA]["size"] % ALIGN:
        c.fail(f"{key}.files['{DATA}'].size", f"is not a multiple of {ALIGN}")
    if files[INDEX]["size"] != index_size(samples):  # exact: numpy's header is fixed
        c.fail(f"{key}.samples", f"({samples}) disagrees with the size of {INDEX} "
               f"({files[INDEX]['size']} bytes, not {index_size(samples)})")
    for kind in KINDS:
        off = column_file(f"{kind.name}.offsets")
        if off in files:
            _rows_fit(c, files[off]["size"], samples + 1, 8, f"{key}.samples", off)
    for fname in files:
        col = fname[len("ann."):-len(".npy")] if fname.startswith("ann.") else None
        if col is not None and col not in schema and not _known_later(col):
            c.fail(f"{key}.files[{_shown(fname)}]", "is not a column of this format version")
    return name


def index_size(samples: int) -> int:
    """The bytes of the ``index.npy`` of ``samples`` records, as ``np.save`` writes it."""
    head = io.BytesIO()
    npy_format.write_array_header_1_0(head, {"descr": npy_format.dtype_to_descr(INDEX_DTYPE),
                                             "fortran_order": False, "shape": (samples,)})
    return len(head.getvalue()) + samples * INDEX_DTYPE.itemsize


def _known_later(col: str) -> bool:
    """A column of a kind this version does not know (a newer writer): listed, never read."""
    return col.split(".", 1)[0] not in {k.name for k in KINDS} | set(SAMPLE_TEXT)


def _rows_fit(c: _Checker, size: int, rows: int, itemsize: int, key: str, fname: str) -> None:
    """``rows`` rows of ``itemsize`` bytes fit an .npy file of ``size`` bytes (header aside)."""
    body = rows * itemsize
    if not body + _NPY_HEADER[0] <= size <= body + _NPY_HEADER[1]:
        c.fail(key, f"({rows - (fname != INDEX)}) disagrees with the size of {fname} "
               f"({size} bytes)")


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of dataset folder ``path``, validated (``shards.schema``); a one-line
    UserError if missing, corrupt, hostile or too new."""
    root = Path(path)
    mf = root / MANIFEST
    if root.is_file():
        raise UserError(f"{root}: a file, not a dataset folder — import it first: `npu-data "
                        f"import {root} --out DATASET`, then pass DATASET")
    if not root.is_dir():
        raise UserError(f"{root}: no such dataset folder — run `npu-data import SRC --out "
                        f"{root}` first")
    if not mf.exists():
        raise UserError(f"{mf}: missing — the import did not finish; run `npu-data import EXPORT "
                        f"--out {root} --resume` (or import again)")
    try:
        data = read_regular(inside(root, MANIFEST), MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise UserError(f"{mf}: cannot read ({exc.strerror}) — check the file's permissions"
                        ) from None
    return parse_manifest(data, str(mf))


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """The manifest in ``data`` (the bytes of ``where``), parsed and validated."""
    try:
        manifest = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DataCorruption(f"{where}: corrupt manifest ({exc}) — import the dataset again"
                             ) from None
    return validate_manifest(manifest, where)
