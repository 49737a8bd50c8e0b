"""Write an AnnotationTable and its images as memory-mapped shards (docs/format.md).

Shard ``k`` holds input rows ``[k*shard_size, (k+1)*shard_size)`` minus the rejected ones,
so any number of workers produces the same bytes. Each shard is written into a temporary
folder, fsynced and renamed into place with its completion record; the manifest comes last.
Split over ranks (``group``, ``shards.distributed_import``), each rank writes its own shards
and rank 0 writes the manifest from every rank's completion records.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from npu_data.annotations.redact import redact_columns
from npu_data.annotations.table import AnnotationTable
from npu_data.common.atomic import atomic_write_bytes, fsync_dir, npy_bytes
from npu_data.common.hashing import file_sha256
from npu_data.common.locks import exclusive
from npu_data.common.oserrors import os_error
from npu_data.common.paths import unsafe_reason
from npu_data.errors import UserError, UserValueError
from npu_data.progress import bar
from npu_data.shards import image_payload as img
from npu_data.shards.convert import to_pixels
from npu_data.shards.distributed_import import SINGLE, Group
from npu_data.shards.format import (
    ALIGN,
    COMPLETE,
    DATA,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
    ORIGINAL_SIZE,
    REJECTED,
    column_file,
    column_schema,
    dumps,
    kinds_with_rows,
    shard_name,
)
from npu_data.shards.repeats import tasks_with_key
from npu_data.shards.source import image_options, load_source


@dataclass
class WriteOptions:
    """How to store the images (``store``, ``max_side``, ``reencode``, ``restart_markers``) and
    how to run."""

    store: str = "raw"
    max_side: int | None = None
    reencode: str | None = None
    workers: int = 1
    shard_size: int = 1024
    resume: bool = False
    strict: bool = False
    images: Any = None  # npu_data.annotations.images.ImageOptions
    annotations: str = "default"
    with_predictions: bool = False
    config: str | None = None
    reject_out_of_range: bool = False
    restart_markers: bool = True  # encoded JPEGs: lossless re-encode with restart markers
    alpha: str = "white"  # transparent pixels over white (as shown), or "drop" (convert("RGB"))
    max_pixels: int = img.IMPORT_MAX_PIXELS  # larger images rejected from their header

    def fingerprint(self) -> dict[str, Any]:
        """The options that decide the bytes written (recorded in the manifest)."""
        d = {k: v for k, v in asdict(self).items()
             if k not in ("workers", "resume", "strict", "images", "restart_markers",
                          "alpha", "max_pixels")}
        if self.alpha != "white":
            d["alpha"] = self.alpha
        if self.store == "encoded":
            d["restart_markers"] = self.restart_markers
        d["images"] = img.options_record(self.images)
        if self.config:
            d["config"] = os.fspath(Path(self.config).resolve())
        return d

    def parse_options(self) -> dict[str, Any]:
        """Keywords for parsing an export."""
        return {"annotations": self.annotations, "with_predictions": self.with_predictions,
                "config": self.config, "reject_out_of_range": self.reject_out_of_range}


@dataclass
class Summary:
    """What an import produced."""

    out_dir: Path
    samples: int
    tasks: int
    shards: int
    rejected: int
    resumed_shards: int
    bytes: int
    rejected_path: Path


def check_options(o: WriteOptions) -> None:
    """A one-line ``UserError`` for options that cannot be written (before any work)."""
    if o.store not in ("raw", "encoded"):
        raise UserValueError(f"{{store={o.store}}}: unknown — use raw or encoded", option="store")
    if o.alpha not in ("white", "drop"):
        raise UserValueError(f"{{alpha={o.alpha}}}: unknown — use white (transparent pixels "
                             "over white, as Label Studio shows them) or drop (Pillow's "
                             "convert('RGB'), as trainers load them)", option="alpha")
    if o.shard_size < 1:
        raise UserValueError(f"{{shard_size={o.shard_size}}}: must be at least 1",
                             option="shard_size")
    if o.workers < 1:
        raise UserValueError(f"{{workers={o.workers}}}: must be at least 1", option="workers")
    if o.max_side is not None and o.max_side < 1:
        raise UserValueError(f"{{max_side={o.max_side}}}: must be at least 1", option="max_side")
    if isinstance(o.max_pixels, bool) or not isinstance(o.max_pixels, int) or o.max_pixels < 1:
        raise UserValueError(f"{{max_pixels={o.max_pixels!r}}}: the most pixels an image may "
                             "have, a positive integer", option="max_pixels")
    if o.reencode is not None:
        img.parse_reencode(o.reencode)
        if o.store != "encoded":
            raise UserValueError("{reencode} needs {store=encoded}", option=("reencode", "store"))
    if not o.restart_markers and o.store != "encoded":
        raise UserValueError("{restart_markers=False} needs {store=encoded} (raw shards hold "
                             "pixels)", option=("restart_markers", "store"))
    if o.store == "encoded" and o.max_side and not o.reencode:
        raise UserValueError("{max_side} with {store=encoded} needs {reencode=jpeg:Q} "
                             "(original bytes cannot be resized)",
                             option=("max_side", "store", "reencode"))


# ---------------------------------------------------------------------------- one shard
def _payloads(table: AnnotationTable, lo: int, hi: int, task_index: np.ndarray,
              o: WriteOptions) -> Iterator[tuple[int, img.Payload | str]]:
    refs = [table.text("image_ref", r) for r in range(lo, hi)]
    fetched = img.prefetch(refs, o.images)  # downloads and cloud objects, in parallel
    for r, ref in zip(range(lo, hi), refs, strict=True):
        try:
            got = fetched.get(ref)
            yield r, img.make_payload(ref, o) if got is None else img.make_payload(ref, o, got)
        except UserError as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            if o.strict:
                tid = int(table.columns["task_id"][r])
                raise UserError(f"task {tid} (#{int(task_index[r])}): {exc.template} — fix the "
                                "image or drop {strict} to skip it",
                                option=(*exc.options, "strict")) from None
            yield r, str(reason)


def write_shard(table: AnnotationTable, k: int, out_dir: Path, o: WriteOptions,
                task_index: np.ndarray, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """Write shard ``k`` atomically; returns its completion record."""
    lo, hi = k * o.shard_size, min(table.num_samples, (k + 1) * o.shard_size)
    name = shard_name(k)
    tmp = out_dir / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    keep: list[int] = []
    rejected: list[dict[str, Any]] = []
    rows: list[tuple[int, int, int, int, int, int, int]] = []
    originals: list[tuple[int, int]] = []
    pos = 0
    with open(tmp / DATA, "wb") as fh:
        for r, p in _payloads(table, lo, hi, task_index, o):
            tid = int(table.columns["task_id"][r])
            if isinstance(p, str):
                rejected.append({"index": int(task_index[r]), "task_id": tid, "reason": p})
                continue
            pad = -pos % ALIGN
            fh.write(b"\0" * pad)
            pos += pad
            fh.write(p.data)
            rows.append((pos, len(p.data), p.height, p.width, p.channels, p.encoding,
                         p.crc32))
            originals.append(p.original if p.original[0] else (p.height, p.width))
            pos += len(p.data)
            keep.append(r)
        fh.write(b"\0" * (-pos % ALIGN))
        fh.flush()
        os.fsync(fh.fileno())
    index = np.zeros(len(rows), dtype=INDEX_DTYPE)
    for i, row in enumerate(rows):
        index[i] = (*row, int(table.columns["task_id"][keep[i]]))
    sub = table.select(keep)
    cols = redact_columns(to_pixels(sub, index["height"].astype(np.int64),  # no secrets on disk
                                    index["width"].astype(np.int64)))
    cols[ORIGINAL_SIZE] = np.asarray(originals, np.int64).reshape(-1, 2)
    files = {INDEX: npy_bytes(index)}
    for col, spec in column_schema().items():
        arr = np.ascontiguousarray(cols[col]).astype(np.dtype(spec["dtype"]), copy=False)
        files[column_file(col)] = npy_bytes(arr.reshape(-1, *spec["shape"]))
    for fname, data in files.items():
        write_synced(tmp / fname, data)
    listing = {DATA: {"size": pos + (-pos % ALIGN), "sha256": file_sha256(tmp / DATA)}}
    for fname, data in files.items():
        listing[fname] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    record = {"name": name, "tasks": [lo, hi], "samples": len(keep), "rejected": rejected,
              "files": dict(sorted(listing.items())), "fingerprint": fingerprint}
    write_synced(tmp / COMPLETE, dumps(record))
    fsync_dir(tmp)
    final = out_dir / name
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    fsync_dir(out_dir)
    return record


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and sync it to the disk (before a record names it)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _markers_hint(old: Any, new: dict[str, Any]) -> str:
    """Where only the restart-marker choice differs (an encoded import started by an older
    npu-data stored JPEGs as they were), the flag that resumes it."""
    if not isinstance(old, dict) or not isinstance(old.get("options"), dict):
        return ""
    was, now = dict(old["options"]), dict(new["options"])
    if was.pop("restart_markers", False) == now.pop("restart_markers", False) or was != now \
            or {k: v for k, v in old.items() if k != "options"} != \
            {k: v for k, v in new.items() if k != "options"}:
        return ""
    return (" (its JPEGs were stored byte for byte: add --keep-jpeg-bytes to resume it)"
            if not old["options"].get("restart_markers") else
            " (its JPEGs were stored with restart markers: drop --keep-jpeg-bytes to resume it)")


def json_record(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (a completion record or a manifest); None when missing,
    not a regular file or unreadable (a torn write: the shard is written again)."""
    if not path.is_file() or path.is_symlink():
        return None
    try:
        record = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _same_options(where: Path, found: Any, fingerprint: dict[str, Any]) -> None:
    """A UserError unless ``found`` (a fingerprint read from ``where``) is ``fingerprint``."""
    if found != fingerprint:
        raise UserError(f"{where}: written with other options or another export"
                        f"{_markers_hint(found, fingerprint)} — import into an empty --out "
                        "folder, or resume with the same options (nothing was changed)")


def _check_resumable(out_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Before ``--resume`` deletes anything: the manifest and every shard's completion record
    in ``out_dir`` were written with ``fingerprint`` (the same options and export)."""
    manifest = json_record(out_dir / MANIFEST)
    if manifest is not None:
        _same_options(out_dir / MANIFEST, {k: manifest.get(k) for k in fingerprint},
                      fingerprint)
    for folder in sorted(out_dir.glob("shard-*")):
        record = json_record(folder / COMPLETE)
        if record is not None:
            _same_options(folder, record.get("fingerprint"), fingerprint)


def completed_record(out_dir: Path, k: int, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The completion record of shard ``k`` if it is whole and matches the options."""
    path = out_dir / shard_name(k) / COMPLETE
    record = json_record(path)
    if record is None:
        return None
    _same_options(path.parent, record.get("fingerprint"), fingerprint)
    files = record.get("files")
    if not isinstance(files, dict):
        return None
    for fname, meta in files.items():
        f = path.parent / fname
        if not isinstance(meta, dict) or unsafe_reason(fname) is not None or not f.is_file() \
                or f.stat().st_size != meta.get("size"):
            return None
    return record


# ------------------------------------------------------------------------- parallel run
_JOB: dict[str, Any] = {}


def _worker(k: int) -> dict[str, Any]:
    j = _JOB
    return write_shard(j["table"], k, j["out"], j["opts"], j["task_index"], j["fp"])


def _run_shards(todo: list[int], table: AnnotationTable, out_dir: Path, o: WriteOptions,
                task_index: np.ndarray, fp: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if o.workers == 1 or len(todo) <= 1:
        for k in todo:
            yield write_shard(table, k, out_dir, o, task_index, fp)
        return
    _JOB.update(table=table, out=out_dir, opts=o, task_index=task_index, fp=fp)
    ctx = mp.get_context("fork")
    with ctx.Pool(min(o.workers, len(todo))) as pool:
        try:
            yield from pool.imap_unordered(_worker, todo)
        finally:
            pool.terminate()
            _JOB.clear()


LOCK = ".npu-data-import.lock"  # in the output folder: held (flock) while an import writes


def import_lock(out_dir: Path) -> contextlib.AbstractContextManager[None]:
    """The exclusive lock of an import into ``out_dir`` (created): a second import of the
    folder fails with one line instead of racing the first."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a folder — choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    return exclusive(out_dir / LOCK, f"{out_dir}: another import is writing this folder "
                     f"(it holds {LOCK}) — wait for it to finish, or import into another "
                     "--out folder")


OWNER = ".npu-data-owner.json"  # in the output folder: npu-data's claim, written first


def _owned(out_dir: Path, entries: list[Path], fingerprint: dict[str, Any]) -> None:
    """Before ``--resume`` deletes anything: ``out_dir`` is a folder npu-data wrote (its owner
    record, else a manifest or a shard completion record of this format: folders written
    before the owner record), written with ``fingerprint`` (the same options and source),
    and every ``shard-*`` entry in it is a shard folder with its completion record — a
    UserError naming what is not, and nothing is changed."""
    fix = ("move it away or choose an empty --out folder (nothing was changed)")
    owner = out_dir / OWNER
    if owner.exists() or owner.is_symlink():
        record = json_record(owner)
        if record is None or record.get("format") != FORMAT_NAME:
            raise UserError(f"{owner}: not an owner record npu-data wrote — {fix}")
        _same_options(out_dir, record.get("fingerprint"), fingerprint)
    manifest = out_dir / MANIFEST
    mine = json_record(manifest)
    if mine is not None and mine.get("format") != FORMAT_NAME:
        mine = None
    if (manifest.exists() or manifest.is_symlink()) and mine is None:
        raise UserError(f"{manifest}: not a manifest npu-data wrote — {fix}")
    shards = [p for p in entries if p.name.startswith("shard-")]
    for folder in sorted(shards):
        if folder.is_symlink() or not folder.is_dir() or json_record(folder / COMPLETE) is None:
            raise UserError(f"{folder}: not a shard npu-data completed (no {COMPLETE}) — "
                            f"{fix}")
    if not (owner.exists() or mine is not None or shards):
        raise UserError(f"{out_dir}: no import or encode of npu-data wrote this folder (no "
                        f"{OWNER}, {MANIFEST} or completed shard) — choose an empty --out "
                        "folder, or move its files away (nothing was changed)")
    _check_resumable(out_dir, fingerprint)


def prepare_out(out_dir: Path, resume: bool, fingerprint: dict[str, Any]) -> None:
    """Check ``out_dir`` (every check before anything is deleted: ``--resume`` only into a
    folder npu-data wrote, ``_owned``), record it as this run's (``OWNER``), then remove
    what a killed run left: temporary shard folders and, on ``--resume``, the manifest."""
    entries = [p for p in out_dir.iterdir() if p.name != LOCK]
    if entries and not resume:
        raise UserError(f"{out_dir}: not empty — pass {{resume}} to continue an import there, "
                        "or choose an empty {out} folder", option=("resume", "out"))
    if entries:
        _owned(out_dir, entries, fingerprint)
    atomic_write_bytes(out_dir / OWNER, dumps({"format": FORMAT_NAME,
                                               "fingerprint": fingerprint}))
    for p in entries:
        if p.name.startswith(".shard-") and ".tmp-" in p.name and p.is_dir() \
                and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)


def table_sha256(table: AnnotationTable) -> str:
    """A digest of every column of ``table`` (identifies a table given without an export)."""
    h = hashlib.sha256()
    for name in sorted(table.columns):
        a = np.ascontiguousarray(table.columns[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(orjson.dumps([table.controls, table.labels], option=orjson.OPT_SORT_KEYS))
    return h.hexdigest()


def write_dataset(source: Any, out_dir: str | os.PathLike[str],
                  options: WriteOptions | None = None, group: Group = SINGLE) -> Summary:
    """Write ``source`` and its images to ``out_dir`` (see the module docstring).

    ``source``: a Label Studio export path (parsed with the options' annotation settings),
    a ``ParseResult`` or an ``AnnotationTable``. ``group``: the ranks splitting the work
    (every rank calls this with the same arguments; ``out_dir`` shared by the ranks).
    """
    o = options or WriteOptions()
    check_options(o)
    if o.images is None:  # image paths are confined even then: to the export's folder
        anchor = source if isinstance(source, (str, os.PathLike)) else None
        o = replace(o, images=image_options(anchor))
    out = Path(out_dir)
    src = load_source(source, o.parse_options())
    table = src.table
    n = table.num_samples
    tix = np.arange(n, dtype=np.int64) if src.task_index is None else src.task_index
    if o.strict and src.rejected:
        r0 = src.rejected[0]
        raise UserError(f"task {r0['task_id']} (#{r0['index']}): {r0['reason']} — fix the task "
                        "or drop {strict} to skip it", option="strict")
    fp = {"options": o.fingerprint(), "source_sha256": src.sha256,
          "table_sha256": table_sha256(table)}
    with contextlib.ExitStack() as held:
        error = None
        if group.rank == 0:
            try:
                held.enter_context(import_lock(out))
                prepare_out(out, o.resume, fp)
            except UserError as exc:
                error = str(exc)
            except OSError as exc:
                error = str(os_error(exc, out, "or choose another --out folder"))
        group.agree(error)  # every rank waits for the prepared folder, or stops with its error
        try:
            return _write_all(table, out, o, group, src, tix, fp)
        except OSError as exc:  # a full disk, a read-only folder, permissions: one line
            raise os_error(exc, out, "then rerun with --resume") from None


def _write_all(table: AnnotationTable, out: Path, o: WriteOptions, group: Group, src: Any,
               tix: np.ndarray, fp: dict[str, Any]) -> Summary:
    """The shards of ``group``'s rank, then (rank 0) the manifest (``write_dataset``)."""
    n = table.num_samples
    earlier = src.rejected
    tasks = src.tasks
    nshards = -(-n // o.shard_size)
    mine = [k for k in range(nshards) if group.mine(k)]
    records: dict[int, dict[str, Any]] = {}
    group = group.begin()  # its failure flag: a failing rank stops the others after a shard
    try:
        if o.resume:
            for k in mine:
                rec = completed_record(out, k, fp)
                if rec is not None:
                    records[k] = rec
        kept = len(records)
        todo = [k for k in mine if k not in records]
        pb = bar(total=sum(min(n, (k + 1) * o.shard_size) - k * o.shard_size for k in mine),
                 desc="import" if group.world == 1 else f"import (rank {group.rank})",
                 unit="task")
        pb.update(sum(r["tasks"][1] - r["tasks"][0] for r in records.values()))
        try:
            for rec in _run_shards(todo, table, out, o, tix, fp):
                records[int(rec["name"].split("-")[1])] = rec
                pb.update(rec["tasks"][1] - rec["tasks"][0])
                if group.stopping():  # another rank failed: its line ends the import
                    break
        finally:
            pb.close()
    except Exception as exc:  # the others stop too, with this rank's one line
        _fail_all(group, exc)
        raise
    group.agree(None)
    resumed = group.gather(kept)  # (collectives only after agree: a failing rank skips them)
    for part in group.gather(records):
        records.update(part)
    ordered = [records[k] for k in range(nshards)]
    all_rejected = sorted(earlier + [r for rec in ordered for r in rec["rejected"]],
                          key=lambda r: (r["index"], r["task_id"]))
    manifest = _manifest(table, o, ordered, all_rejected, fp, tasks if tasks is not None else n)
    if group.world > 1 and group.shared:  # a folder on each node would be half a dataset
        lost = [k for k in range(nshards) if group.rank == 0
                and not (out / shard_name(k) / COMPLETE).is_file()]
        group.agree(None if not lost else (
            f"{out}: {shard_name(lost[0])} (written by rank {lost[0] % group.world}) is not in "
            "this folder — give --out a folder every rank sees (one node or a shared file "
            "system), or an s3:// URL"))
    if group.rank == 0:
        atomic_write_bytes(out / REJECTED, b"".join(
            orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in all_rejected))
        atomic_write_bytes(out / MANIFEST, dumps(manifest))
    group.barrier()  # no rank returns before the manifest is there
    total_bytes = sum(m["size"] for rec in ordered for m in rec["files"].values())
    return Summary(out, manifest["counts"]["samples"], manifest["counts"]["tasks"], nshards,
                   len(all_rejected), sum(resumed), total_bytes, out / REJECTED)


def _fail_all(group: Group, exc: Exception) -> None:
    """Stop every rank with ``exc``'s line (raised as a UserError: a mistake or an OSError
    such as a full disk); an unexpected error keeps its traceback on this rank."""
    if group.world == 1:
        return
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else " the shards"
        msg = (f"cannot write{where} ({exc.strerror or exc}) — free space or fix the folder, "
               "then rerun with --resume")
    elif isinstance(exc, UserError):
        msg = str(exc)
    else:
        msg = f"{type(exc).__name__}: {exc} (an internal error: its traceback is in its output)"
    group.stop_all(msg)
    try:
        group.agree(msg)
    except UserError as agreed:
        if isinstance(exc, (UserError, OSError)):
            raise agreed from None


def _manifest(table: AnnotationTable, o: WriteOptions, records: list[dict[str, Any]],
              rejected: list[dict[str, Any]], fp: dict[str, Any], tasks: int) -> dict[str, Any]:
    schema = column_schema()
    counts = {"samples": sum(r["samples"] for r in records), "tasks": tasks,
              "rows": table.num_samples, "rejected": len(rejected), "shards": len(records)}
    with_repeats = tasks_with_key(table.columns["data_json.bytes"].tobytes(),
                                  table.columns["data_json.offsets"])
    if with_repeats:  # the samplers serve these samples their repeat count (shards.repeats)
        counts["repeats"] = with_repeats
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "byteorder": "little",
        "align": ALIGN,
        "store": o.store,
        "index_dtype": [[n, INDEX_DTYPE[n].str] for n in INDEX_DTYPE.names or ()],
        "columns": schema,
        "kinds": kinds_with_rows(records),
        "controls": list(table.controls),
        "labels": {k: list(v) for k, v in table.labels.items()},
        "counts": counts,
        "shard_size": o.shard_size,
        "shards": [{"name": r["name"], "samples": r["samples"], "tasks": r["tasks"],
                    "files": r["files"]} for r in records],
        "source_sha256": fp["source_sha256"],
        "table_sha256": fp["table_sha256"],
        "options": fp["options"],
    }
