"""Check a shard folder against its manifest: the manifest itself, file sizes and sha256, the
files' structure and every sample's crc32."""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from npu_data.annotations.table import SAMPLE_TEXT
from npu_data.common.hashing import CHUNK
from npu_data.common.paths import inside, open_regular
from npu_data.errors import UserError
from npu_data.kinds.registry import BY_NAME, KINDS
from npu_data.progress import progress
from npu_data.shards import file_checks as checks
from npu_data.shards.format import DATA, INDEX, INDEX_DTYPE, column_file
from npu_data.shards.image_payload import MAX_PIXELS
from npu_data.shards.latent_format import (
    CAPTION_ROWS,
    DTYPES,
    cell_bytes,
    column_spec,
    expected_rows,
    nonfinite,
)
from npu_data.shards.schema import read_manifest


@dataclass
class Problem:
    """One thing wrong: where (shard, sample inside it, task id) and what."""

    shard: str
    message: str
    sample: int | None = None
    task_id: int | None = None
    index: int | None = None  # dataset index of the sample

    def __str__(self) -> str:
        where = self.shard
        if self.sample is not None:
            where += f" sample {self.sample} (dataset index {self.index}, task {self.task_id})"
        return f"{where}: {self.message}"


def verify_dataset(path: str | os.PathLike[str],
                   max_pixels: int = MAX_PIXELS) -> list[Problem]:
    """Every problem found in dataset ``path`` (empty list: all files and samples intact).

    The manifest is validated first (``shards.schema``: a bad one is a one-line
    ``DataCorruption``); then, shard by shard, every listed file must be a regular file inside
    the folder with the manifest's size and sha256, the files' structure must hold
    (``shards.file_checks``: what the manifest says of them, dtypes, shapes, row counts, offsets,
    the index inside data.bin, image sizes at most ``max_pixels``) and every sample's
    payload its crc32 — so a copy whose files were changed and rehashed into its manifest
    still fails when the manifest disagrees with them."""
    root = Path(path)
    manifest = read_manifest(root)
    problems: list[Problem] = []
    if manifest["store"] == "latents":  # the dataset-level files: the empty prompt's
        for fname, meta in manifest["latents"]["empty_prompt"].items():
            why = _file_problem(root, fname, meta)
            if why is not None:
                problems.append(Problem(".", why))
    start = 0
    for sh in progress(manifest["shards"], total=len(manifest["shards"]), desc="verify",
                       unit="shard"):
        name = sh["name"]
        folder = inside(root, name)
        bad_files = set()
        for fname, meta in sh["files"].items():
            why = _file_problem(folder, fname, meta)
            if why is not None:
                problems.append(Problem(name, why))
                if not why.endswith("sha256 differs from the manifest") or fname == INDEX:
                    bad_files.add(fname)
        if not bad_files & {DATA, INDEX}:
            problems.extend(_check_structure(folder, sh, bad_files, start, max_pixels,
                                             (manifest["controls"], manifest["labels"]),
                                             manifest.get("latents")))
        start += int(sh["samples"])
    return problems


def _file_problem(folder: Path, fname: str, meta: dict[str, Any]) -> str | None:
    """What is wrong with file ``fname`` of a shard (None: its size and sha256 match)."""
    try:
        fd = open_regular(inside(folder, fname))
    except FileNotFoundError:
        return f"{fname} missing"
    except (UserError, OSError) as exc:
        return f"{fname}: {exc.strerror if isinstance(exc, OSError) else exc}"
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size != meta["size"]:
            return f"{fname} has {size} bytes, manifest says {meta['size']}"
        while block := fh.read(CHUNK):
            h.update(block)
    if h.hexdigest() != meta["sha256"]:
        return f"{fname} sha256 differs from the manifest"
    return None


def _check_structure(folder: Path, sh: dict[str, Any], bad_files: set[str], start: int,
                     max_pixels: int, vocab: checks.Vocab,
                     latents: dict[str, Any] | None = None) -> list[Problem]:
    """The shard's structure (``shards.file_checks``; ``latents``: a latents store's record),
    then each sample's crc32."""
    name, samples, files = sh["name"], int(sh["samples"]), sh["files"]
    layout = None if latents is None else (int(latents["factor"]), cell_bytes(latents))
    try:
        index = checks.open_npy(folder / INDEX, INDEX_DTYPE, (), files[INDEX]["size"])
        checks.check_index(index, samples, int(files[DATA]["size"]), max_pixels, layout)
    except checks.Damaged as exc:
        return [Problem(name, str(exc))]
    out: list[Problem] = []
    sizes = np.stack([index["height"], index["width"]], axis=1).astype(np.int64)
    for group in (*(k.name for k in KINDS), *SAMPLE_TEXT):
        kind = BY_NAME.get(group)
        later = checks.absent_added(kind, files)  # written before: read as the default
        fnames = [column_file(c) for c in checks.group_columns(group) if c not in later]
        if not all(f in files for f in fnames) or bad_files & set(fnames):
            continue  # a kind this dataset was written without, or a file reported above
        try:
            cols = checks.open_group(group, kind, files, lambda c, dt, shape: checks.open_npy(
                folder / column_file(c), dt, shape, files[column_file(c)]["size"]))
            checks.check_group(group, kind, cols, samples, sizes, vocab)
        except checks.Damaged as exc:
            out.append(Problem(name, str(exc)))
    if latents is not None:
        out += _check_latent_columns(folder, name, files, bad_files, samples, latents)
    return out + _check_samples(folder, name, index, start, latents)


def _check_latent_columns(folder: Path, name: str, files: dict[str, Any], bad_files: set[str],
                          samples: int, latents: dict[str, Any]) -> list[Problem]:
    """A latents store's columns: listed, the dtype and shape of the record, one row (or
    string) per sample."""
    spec = column_spec(latents)
    out: list[Problem] = []
    cols = {}
    for c, (dt, shape) in spec.items():
        fname = column_file(c)
        if fname not in files:
            out.append(Problem(name, f"{fname} is not listed in the manifest"))
            continue
        if fname in bad_files:
            continue
        try:
            cols[c] = checks.open_npy(folder / fname, dt, shape, files[fname]["size"])
        except checks.Damaged as exc:
            out.append(Problem(name, str(exc)))
    try:
        want = expected_rows(cols, samples)
    except ValueError as exc:
        return [*out, Problem(name, f"{column_file(CAPTION_ROWS)}: {exc}")]
    for c, arr in cols.items():
        stored = arr.dtype == np.dtype(DTYPES[latents["dtype"]][0])  # the embeddings
        bad = nonfinite(arr, latents["dtype"]) if stored and not c.endswith(
            (".bytes", ".offsets")) else 0
        if bad:
            out.append(Problem(name, f"{column_file(c)} holds {bad} NaN or infinite values"))
        try:
            if c.endswith(".offsets") and f"{c[:-8]}.bytes" in cols:
                checks.check_text(cols, c[:-len(".offsets")], want[c[:-len(".offsets")]])
            elif c in want and len(arr) != want[c]:
                what = "caption rows" if want[c] != samples else "samples"
                raise checks.Damaged(column_file(c), f"holds {len(arr)} rows, the shard has "
                                     f"{want[c]} {what}")
        except checks.Damaged as exc:
            out.append(Problem(name, str(exc)))
    return out


def _check_samples(folder: Path, name: str, index: np.ndarray, start: int,
                   latents: dict[str, Any] | None = None) -> list[Problem]:
    size = (folder / DATA).stat().st_size
    data = np.memmap(folder / DATA, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    out: list[Problem] = []
    for j, rec in enumerate(index):
        off, length = int(rec["offset"]), int(rec["length"])
        where = {"sample": j, "task_id": int(rec["task_id"]), "index": start + j}
        if off + length > size:
            out.append(Problem(name, "payload runs past the end of data.bin", **where))
        elif zlib.crc32(cast(Any, data[off:off + length])) != int(rec["crc32"]):
            out.append(Problem(name, "payload crc32 mismatch (corrupt bytes)", **where))
        elif latents is not None and (bad := _nonfinite_payload(data[off:off + length],
                                                                latents["dtype"])):
            out.append(Problem(name, f"latents hold {bad} NaN or infinite values", **where))
    return out


def _nonfinite_payload(payload: np.ndarray, dtype: str) -> int:
    npd = np.dtype(DTYPES[dtype][0])
    if len(payload) % npd.itemsize:
        return 0  # its layout is checked with the index
    return nonfinite(np.asarray(payload).view(npd), dtype)
