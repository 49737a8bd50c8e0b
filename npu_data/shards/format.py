"""The on-disk shard format (version 1): names, dtypes and manifest helpers.

See docs/format.md for the full description. Everything is plain little-endian data:
``manifest.json`` (UTF-8 JSON), ``shard-NNNNN/data.bin`` (payload bytes, each aligned to
``ALIGN``), ``index.npy`` (structured, ``INDEX_DTYPE``), ``ann.<column>.npy`` and
``complete.json`` (the shard's completion record).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson

from npu_data.annotations.table import SAMPLE_TEXT
from npu_data.errors import UserError
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import KINDS, kinds_named

FORMAT_NAME = "npu-data-shards"
FORMAT_VERSION = 1
ALIGN = 64
MANIFEST = "manifest.json"
REJECTED = "rejected.jsonl"
COMPLETE = "complete.json"
DATA = "data.bin"
INDEX = "index.npy"

ENCODINGS = ("raw", "jpeg", "png", "other", "latents")
ENC_RAW, ENC_JPEG, ENC_PNG, ENC_OTHER, ENC_LATENTS = 0, 1, 2, 3, 4
STORES = ("raw", "encoded", "latents")  # a latents store holds VAE latents (docs/format.md)

INDEX_DTYPE = np.dtype([
    ("offset", "<u8"), ("length", "<u8"), ("height", "<u4"), ("width", "<u4"),
    ("channels", "<u2"), ("encoding", "u1"), ("crc32", "<u4"), ("task_id", "<i8"),
])

F32 = np.dtype("<f4")
ORIGINAL_SIZE = "original_size"  # per sample: the photo's (height, width) before max_side


def shard_name(k: int) -> str:
    """Folder name of shard ``k``."""
    return f"shard-{k:05d}"


def column_schema() -> dict[str, dict[str, Any]]:
    """Every ``ann.<column>.npy`` of a shard: column -> {dtype, shape (trailing)}."""
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, dt: np.dtype, shape: tuple[int, ...]) -> None:
        out[name] = {"dtype": dt.str, "shape": list(shape)}

    for name in SAMPLE_TEXT:
        add(f"{name}.bytes", np.dtype("u1"), ())
        add(f"{name}.offsets", np.dtype("<i8"), ())
    add(ORIGINAL_SIZE, np.dtype("<u4"), (2,))
    for kind in KINDS:
        for name, (dt, shape) in kind.stored_columns().items():
            add(name, dt, shape)
    return dict(sorted(out.items()))


def kinds_with_rows(shards: list[dict[str, Any]]) -> list[str]:
    """Names of the kinds with at least one row in ``shards`` (manifest entries), read from
    the sizes of their column files: a column with rows is larger than an empty one."""
    return [k.name for k in KINDS if any(_has_rows(k, s.get("files", {})) for s in shards)]


def _has_rows(kind: Kind, files: dict[str, Any]) -> bool:
    name = kind.row_columns()[0]
    dt, shape = kind.stored_columns()[f"{kind.name}.{name}"]
    meta = files.get(column_file(f"{kind.name}.{name}"))
    empty = io.BytesIO()
    np.save(empty, np.zeros((0, *shape), dt), allow_pickle=False)
    return meta is None or int(meta["size"]) > len(empty.getvalue())


def dataset_kinds(manifest: dict[str, Any], where: str = MANIFEST) -> tuple[Kind, ...]:
    """The kinds a dataset has rows of: the manifest's ``kinds`` (written since they were
    recorded), else from its column files' sizes (``kinds_with_rows``); a kind this version
    does not know is a ``UserError`` naming ``where`` (the manifest's path)."""
    names = manifest.get("kinds")
    if names is None:
        names = kinds_with_rows(manifest["shards"])
    unknown = sorted(set(names) - {k.name for k in KINDS})
    if unknown:
        raise UserError(f"{where}: annotation kinds {unknown} are unknown to this npu-data "
                        "(made by a newer one) — upgrade npu-data")
    return kinds_named(names)


def column_file(column: str) -> str:
    """File name of annotation column ``column`` inside a shard."""
    return f"ann.{column}.npy"


def dumps(obj: Any) -> bytes:
    """Deterministic compact JSON bytes (sorted keys, trailing newline)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"
