"""Writing a dataset folder as WebDataset tars: ``<key>.<jpg|png>`` (the stored file bytes;
raw images as PNG) + ``<key>.json`` (``mapping.sample_json``) per sample, each tar written
atomically (``common.atomic``), then a manifest listing them (written last)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from PIL import Image

from npu_data.common.atomic import atomic_file, atomic_write_bytes
from npu_data.common.hashing import file_sha256
from npu_data.errors import UserError, UserValueError
from npu_data.formats.webdataset.mapping import VERSION, sample_json
from npu_data.kinds.registry import KINDS
from npu_data.shards.format import ENC_JPEG, ENC_PNG, ENC_RAW

EXT = {ENC_JPEG: "jpg", ENC_PNG: "png"}
MANIFEST_FORMAT = "npu-data-webdataset"


def manifest_path(pattern: str) -> Path:
    """Where the manifest of tars ``pattern`` goes: beside them, named by the pattern's
    prefix (``wds/train-%06d.tar`` -> ``wds/train-manifest.json``)."""
    p = Path(pattern)
    return p.parent / f"{p.name[:p.name.index('%')]}manifest.json"


def check_pattern(pattern: str) -> None:
    """A one-line ``UserValueError`` unless ``pattern % n`` names a different tar file for
    every shard number ``n`` (one integer conversion, in the file name only)."""
    try:
        first, second = Path(pattern % 0), Path(pattern % 1)
    except (TypeError, ValueError, OverflowError) as exc:
        why = f"not a pattern of one shard number ({exc})"
    else:
        ok = first.name != second.name and first.parent == second.parent
        why = "" if ok and "%" in Path(pattern).name else "needs a shard number in the file name"
    if why:
        raise UserValueError(f"{{pattern}} {pattern!r}: {why} — use one %d-style number, e.g. "
                             "'wds/train-%06d.tar' (write a literal % as %%)", option="pattern")


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o444, 0
    tar.addfile(info, io.BytesIO(data))


def _image_bytes(ds: Any, i: int, s: dict[str, Any]) -> tuple[bytes, str]:
    k, j = ds.locate(i)
    sh = ds.shard(k)
    rec = sh.index[j]
    enc = int(rec["encoding"])
    if enc == ENC_RAW or enc not in EXT:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(s["image"])).save(buf, "PNG", compress_level=6)
        return buf.getvalue(), "png"
    off, n = int(rec["offset"]), int(rec["length"])
    return sh.data[off:off + n].tobytes(), EXT[enc]


def _text(ds: Any, i: int, name: str) -> str:
    k, j = ds.locate(i)
    sh = ds.shard(k)
    off = sh.col(f"{name}.offsets")
    return bytes(sh.col(f"{name}.bytes")[int(off[j]):int(off[j + 1])]).decode("utf-8")


def _groups(ds: Any, maxcount: int, maxsize: int) -> Any:
    """(tar number, key, image bytes, ext, JSON) per sample, tars cut at ``maxcount`` samples
    or ``maxsize`` bytes."""
    from npu_data.progress import progress

    tar = count = size = 0
    kinds = [k.name for k in getattr(ds, "kinds", ())] or [k.name for k in KINDS]
    for i in progress(range(len(ds)), total=len(ds), desc="export-wds", unit="sample"):
        s = ds[i]
        img, ext = _image_bytes(ds, i, s)
        meta = sample_json(s, ds.controls, ds.labels, kinds, {
            "image_ext": ext, "data": orjson.loads(_text(ds, i, "data_json") or "{}"),
            "image_ref": _text(ds, i, "image_ref")})
        if count and (count >= maxcount or size + len(img) + len(meta) > maxsize):
            tar, count, size = tar + 1, 0, 0
        count += 1
        size += len(img) + len(meta) + 2048  # two headers and padding
        yield tar, f"{int(s['index']):09d}", img, ext, meta


def export_wds(dataset: str | os.PathLike[str], pattern: str, maxcount: int = 10000,
               maxsize: int = 1 << 30) -> list[Path]:
    """Write dataset folder ``dataset`` as tars named ``pattern % shard_number`` and their
    manifest (``manifest_path``); returns the tars."""
    from npu_data.shards.reader import ShardDataset

    check_pattern(pattern)
    if maxcount < 1 or maxsize < 1:
        raise UserValueError(f"{{maxcount={maxcount}}}, {{maxsize={maxsize}}}: both must be at "
                             "least 1", option=("maxcount", "maxsize"))
    ds = ShardDataset(dataset)
    if ds.latents is not None:  # a tar of images: a store holds no image to write
        raise UserError(f"{dataset}: a latents store holds VAE latents, not images — export "
                        "the image dataset it was encoded from (`npu-data export-wds SHARDS "
                        "--out ...`); train from the store itself with ShardDataset")
    written: list[Path] = []
    entries: list[dict[str, Any]] = []
    samples = _groups(ds, maxcount, maxsize)
    pending = next(samples, None)
    while pending is not None:
        number = pending[0]
        target = Path(pattern % number)
        n = 0
        with atomic_file(target, suffix=".part") as fh, tarfile.open(
                fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            while pending is not None and pending[0] == number:
                _, key, img, ext, meta = pending
                _member(tar, f"{key}.{ext}", img)
                _member(tar, f"{key}.json", meta)
                n += 1
                pending = next(samples, None)
        written.append(target)
        entries.append({"name": target.name, "samples": n, "bytes": target.stat().st_size,
                        "sha256": file_sha256(target)})
    manifest = {"format": MANIFEST_FORMAT, "version": VERSION, "samples": len(ds),
                "controls": ds.controls, "labels": ds.labels, "tars": entries}
    atomic_write_bytes(manifest_path(pattern), orjson.dumps(manifest, option=orjson.OPT_INDENT_2
                                                            | orjson.OPT_SORT_KEYS))
    return written
