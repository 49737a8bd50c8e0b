"""Parse a Label Studio export (JSON, JSON_MIN or pre-1.0 ``completions``) into an
AnnotationTable, chunk by chunk from a memory map (see scan.py), with orjson."""

from __future__ import annotations

import gc
import json
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from npu_data.annotations import results as R
from npu_data.annotations.builders import GroupBuilder, Rows, SampleBuilder, build_table
from npu_data.annotations.collect import TYPED, Calls, group, value_of
from npu_data.annotations.scan import NOT_A_LIST, element_chunks, fast_chunks
from npu_data.annotations.table import AnnotationTable
from npu_data.errors import UserError, UserFileNotFoundError, UserValueError
from npu_data.kinds.registry import BY_NAME, KINDS
from npu_data.progress import bar

Mode = Literal["default", "latest", "ground-truth", "all"]
MIN_RESERVED = {"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time",
                "drafts", "predictions", "meta"}
CHUNK_MIN, CHUNK_MAX = 256 << 10, 1 << 20  # bytes of tasks handed to orjson at once (the
# objects of a chunk then stay in the CPU caches for the column passes over them)
IMAGE_PREFIXES = ("/data/", "http://", "https://", "s3://", "gs://", "azure-blob://", "file://")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")


@dataclass
class Rejection:
    """A task that was not imported, and why."""

    index: int
    task_id: int | None
    reason: str


@dataclass
class ParseStats:
    """Counts gathered while parsing."""

    flavour: str = "empty"
    tasks: int = 0
    samples: int = 0
    results: dict[str, int] = field(default_factory=dict)
    unknown_types: dict[str, int] = field(default_factory=dict)
    clipped: int = 0
    cancelled_skipped: int = 0
    annotations_used: int = 0
    predictions_used: int = 0
    prediction_ids_ignored: int = 0
    labels_not_in_config: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class ParseResult:
    """The table, the rejected tasks and the statistics of one export."""

    table: AnnotationTable
    rejected: list[Rejection]
    stats: ParseStats


def image_ref(data: dict, image_key: str | None = None) -> str | None:
    """The image reference of a task's ``data`` (``image_key``, ``image``, or a guess)."""
    if image_key is not None:
        v = data.get(image_key)
        return v if isinstance(v, str) and v else None
    v = data.get("image")
    if isinstance(v, str) and v:
        return v
    for v in data.values():
        if isinstance(v, str) and (v.startswith(IMAGE_PREFIXES)
                                   or v.lower().endswith(IMAGE_SUFFIXES)):
            return v
    return None


def _ann_key(a: dict) -> tuple[str, int]:
    aid = a.get("id")
    return (str(a.get("updated_at") or a.get("created_at") or ""),
            aid if isinstance(aid, int) else -1)


def _flavour(task: Any) -> str:
    if not isinstance(task, dict):
        return "json"
    if "completions" in task and "annotations" not in task:
        return "completions"
    if "annotations" in task or isinstance(task.get("data"), dict):
        return "json"
    return "json-min"


class _Chunk:
    def __init__(self) -> None:
        self.calls = Calls()
        self.rows: list[tuple[int, int, str, bytes]] = []  # task id, index, image ref, data
        self.sizes: dict[int, tuple[int, int]] = {}  # row -> image size, where known
        self.min_new: list[list[Any]] = []  # JSON_MIN index entries made in this chunk


class _Parser:
    def __init__(self, name: str, mode: Mode, with_predictions: bool,
                 labels: dict[str, list[str]] | None, clip: bool,
                 image_key: str | None) -> None:
        if mode not in ("default", "latest", "ground-truth", "all"):
            raise UserValueError(f"{{annotations={mode!r}}}: use default, latest, ground-truth "
                                 "or all", option="annotations")
        self.name, self.mode, self.with_predictions = name, mode, with_predictions
        self.config = labels
        self.image_key = image_key
        self.ctx = R.Context(self._label_id, self._label_ids, clip)
        self.ctrl: dict[str, int] = {}
        self.gid: dict[tuple[int, str], int] = {}
        self.gid_of: dict[int, dict[str, int]] = {}  # the same ids, by control
        self.samples = SampleBuilder()
        self.groups = {k.name: GroupBuilder(k.name) for k in KINDS}
        self.stats = ParseStats()
        self.rejected: list[Rejection] = []
        self.slot = 0
        self.dead: set[int] = set()
        self.late_sizes: dict[int, tuple[int, int]] = {}
        self.late_bad: dict[int, str] = {}
        self.min_index: dict[Any, list[Any]] = {}  # JSON_MIN: task id -> [sample, key, slot,
        # image reference]
        self.task_index: list[np.ndarray] = []  # export index of every sample, by chunk

    # --- ids ----------------------------------------------------------------------------
    def _control(self, name: str) -> int:
        c = self.ctrl.get(name)
        if c is None:
            c = self.ctrl[name] = len(self.ctrl)
        return c

    def _label_id(self, control: int, label: str) -> int:
        key = (control, label)
        g = self.gid.get(key)
        if g is None:
            g = self.gid[key] = len(self.gid)
            self.gid_of.setdefault(control, {})[label] = g
        return g

    def _label_ids(self, controls: np.ndarray, labels: list[str]) -> list[int]:
        if len(controls) and controls.min() == controls.max():  # one control: its own dict
            c = int(controls[0])
            ids = self.gid_of.setdefault(c, {})
            for name in set(labels).difference(ids):
                self._label_id(c, name)
            return list(map(ids.__getitem__, labels))
        pairs = list(zip(controls.tolist(), labels, strict=True))
        for key in set(pairs).difference(self.gid):
            self._label_id(*key)
        return list(map(self.gid.__getitem__, pairs))

    # --- tasks --------------------------------------------------------------------------
    def chunk(self, tasks: list, first_index: int) -> None:
        ch = _Chunk()
        base = self.samples.count
        self.ctx.bad = {}
        st = self.stats
        st.tasks += len(tasks)
        full_task = self._full_task
        seen = st.flavour
        for idx, task in enumerate(tasks, first_index):
            fl = "json" if task.__class__ is dict and "annotations" in task else _flavour(task)
            if fl != seen:
                seen = st.flavour = fl if st.flavour in ("empty", fl) else "mixed"
            if fl == "json" and task.__class__ is dict:
                full_task(task, idx, ch, base)
            elif not isinstance(task, dict):
                self.rejected.append(Rejection(idx, None, "task is not a JSON object"))
            elif fl == "json-min":
                self._min_row(task, idx, ch, base)
            else:
                full_task(task, idx, ch, base)
        ctx = self.ctx
        rows_now = ch.rows
        ctx.task_of = lambda s: (rows_now[s - base][0] if s >= base
                                 else int(np.concatenate(self.samples.task_id)[s]))
        batches = group(ch.calls, self._control, self.stats.results, ctx.unknown,
                        ctx.reject_field)
        pieces = {k: BY_NAME[k].extract(ctx, b, R) for k, b in batches.items()}  # R: the toolkit
        del batches
        task_id, task_index, refs, datas = (list(c) for c in zip(*ch.rows, strict=True)) \
            if ch.rows else ([], [], [], [])
        n_new = len(ch.rows)
        keep = np.ones(n_new, bool)
        for s, reason in ctx.bad.items():
            if s >= base:
                keep[s - base] = False
                self.rejected.append(Rejection(task_index[s - base], task_id[s - base],
                                               reason))
            else:
                self.late_bad.setdefault(s, reason)
        remap = np.full(n_new, -1, np.int64)
        remap[keep] = base + np.arange(int(keep.sum()))
        for kind, rows in pieces.items():
            if not keep.all():
                new = rows.sample >= base
                ok = ~new.copy()
                ok[new] = keep[rows.sample[new] - base]
                rows = rows.take(ok)
            new = rows.sample >= base
            rows.sample[new] = remap[rows.sample[new] - base]
            self.groups[kind].add(rows)
        for entry in ch.min_new:  # JSON_MIN tasks first seen in this chunk
            entry[0] = None if remap[entry[0] - base] < 0 else int(remap[entry[0] - base])
        width, height = [0] * n_new, [0] * n_new
        for j, (w, h) in ch.sizes.items():
            width[j], height[j] = w, h
        if not keep.all():
            sel = np.flatnonzero(keep).tolist()
            task_id, task_index, width, height, refs, datas = (
                [c[j] for j in sel] for c in (task_id, task_index, width, height, refs, datas))
        self.task_index.append(np.asarray(task_index, np.int64))
        self.samples.add(task_id, width, height, refs, datas)

    def _new_sample(self, ch: _Chunk, base: int, idx: int, tid: int, data: dict,
                    ref: str) -> int:
        ch.rows.append((tid, idx, ref, orjson.dumps(data)))
        return base + len(ch.rows) - 1

    def _full_task(self, task: dict, idx: int, ch: _Chunk, base: int) -> None:
        tid_raw = task.get("id")
        tid = tid_raw if isinstance(tid_raw, int) else idx
        data = task.get("data")
        if not isinstance(data, dict):
            self.rejected.append(Rejection(idx, tid_raw, "task has no 'data' object"))
            return
        ref = data.get("image")
        if ref.__class__ is not str or not ref or self.image_key is not None:
            ref = image_ref(data, self.image_key)
            if ref is None:
                self.rejected.append(Rejection(idx, tid_raw, "no image reference in task data "
                                               f"(keys: {sorted(data)})"))
                return
        ch.rows.append((tid, idx, ref, orjson.dumps(data)))
        s = base + len(ch.rows) - 1
        anns = task.get("annotations")
        if anns is None:
            anns = task.get("completions") or []
        size = (0, 0)
        stats = self.stats
        if anns.__class__ is list and len(anns) == 1 and anns[0].__class__ is dict:
            a = anns[0]  # the common case: one annotation, chosen unless cancelled / not GT
            if a.get("was_cancelled"):
                stats.cancelled_skipped += 1
                chosen = []
            else:
                chosen = [a] if self.mode != "ground-truth" or a.get("ground_truth") else []
        else:
            chosen = self._choose(anns if isinstance(anns, list) else [])
        for a in chosen:
            aid = a.get("id")
            size = self._results(a.get("result") or [], s, aid if isinstance(aid, int) else -1,
                                 0, None, ch, size)
            stats.annotations_used += 1
        preds = task.get("predictions")
        if preds:
            for p in preds:
                if not isinstance(p, dict):
                    stats.prediction_ids_ignored += 1
                elif self.with_predictions:
                    pid = p.get("id")
                    size = self._results(p.get("result") or [], s,
                                         pid if isinstance(pid, int) else -1, 1,
                                         p.get("score"), ch, size)
                    stats.predictions_used += 1
        if size[0]:
            ch.sizes[s - base] = size

    def _choose(self, anns: list) -> list[dict]:
        valid = []
        for a in anns:
            if isinstance(a, dict):
                if a.get("was_cancelled"):
                    self.stats.cancelled_skipped += 1
                else:
                    valid.append(a)
        if self.mode == "all" or not valid:
            return valid
        gt = [a for a in valid if a.get("ground_truth")]
        pool = {"ground-truth": gt, "latest": valid}.get(self.mode, gt or valid)
        return [max(pool, key=_ann_key)] if pool else []

    def _results(self, results: list, s: int, ann: int, src: int, pscore: Any, ch: _Chunk,
                 size: tuple[int, int]) -> tuple[int, int]:
        """Queue one result list for the chunk; returns ``size`` or, while it is unknown, the
        image size of the first result that gives one."""
        self.slot += 1
        if results.__class__ is not list:
            results = list(results)
        ch.calls.results.append(results)
        ch.calls.meta.append((s, self.slot, ann, src, pscore))
        if size[0]:
            return size
        for r in results:
            if r.__class__ is dict:
                w, t = r.get("original_width"), r.get("type")
                if w.__class__ is int and w > 0 and t.__class__ is str and t in TYPED:
                    h = r.get("original_height")  # the common case, _size() otherwise
                    if h.__class__ is int and h > 0:
                        return (w, h)
                val = value_of(r)
                if val is not None:
                    size = _size(r, val, size)
                    if size[0]:
                        break
        return size

    # --- JSON_MIN -----------------------------------------------------------------------
    def _is_control(self, key: str, val: Any) -> bool:
        if self.config is not None and key in self.config:
            return True
        if isinstance(val, list) and val and all(isinstance(v, dict) for v in val):
            return True
        if self.config is None and isinstance(val, list) and val and all(
                isinstance(v, str) for v in val):
            return True  # TextArea; a single string stays data without a config
        return isinstance(val, dict) and R.infer_type(val) is not None

    def _min_results(self, key: str, val: Any) -> list[dict]:
        if isinstance(val, dict):
            val = [val]
        if isinstance(val, list) and val and all(isinstance(v, dict) for v in val):
            return [{"from_name": key, "value": v, "type": R.infer_type(v)} for v in val]
        strings = [v for v in (val if isinstance(val, list) else [val]) if v is not None]
        if self.config is not None and self.config.get(key):
            return [{"from_name": key, "type": "choices", "value": {"choices": strings}}]
        return [{"from_name": key, "type": "textarea", "value": {"text": strings}}]

    def _min_row(self, row: dict, idx: int, ch: _Chunk, base: int) -> None:
        data: dict[str, Any] = {}
        results: list[dict] = []
        for k, v in row.items():
            if k in MIN_RESERVED:
                continue
            if self._is_control(k, v):
                results.extend(self._min_results(k, v))
            else:
                data[k] = v
        tid_raw = row.get("id")
        # a row without an id is its own task (its position its identity); rows that share
        # an id are one task's annotations, one row per annotator, as Label Studio writes them
        ident = tid_raw if tid_raw is not None and not isinstance(tid_raw, (list, dict)) \
            else ("#", idx)
        entry = self.min_index.get(ident)
        ref = image_ref(data, self.image_key)
        if entry is None:
            if ref is None:
                self.rejected.append(Rejection(idx, tid_raw if isinstance(tid_raw, int) else None,
                                               f"no image reference in row (keys: {sorted(data)})"))
                self.min_index[ident] = [None, None, None, None]
                return
            tid = tid_raw if isinstance(tid_raw, int) else idx
            s = self._new_sample(ch, base, idx, tid, data, ref)
            entry = self.min_index[ident] = [s, None, None, ref]
            ch.min_new.append(entry)
        elif entry[3] is not None and ref != entry[3]:
            self.rejected.append(Rejection(
                idx, tid_raw if isinstance(tid_raw, int) else None,
                f"row repeats task id {tid_raw!r} with another image ({ref!r}, not "
                f"{entry[3]!r}) — rows of one id are one task's annotations; give each task "
                "its own id (or none)"))
            return
        s = entry[0]
        if s is None or (row.get("annotation_id") is None and not results):
            return
        aid = row.get("annotation_id")
        key: tuple[str, int] = (str(row.get("updated_at") or row.get("created_at") or ""),
                                aid if isinstance(aid, int) else -1)
        if self.mode == "ground-truth":
            return
        if self.mode != "all":
            if entry[1] is not None and key <= entry[1]:
                return
            if entry[2] is not None:
                self.dead.add(entry[2])
            entry[1] = key
        ann = key[1]
        size = self._results(results, s, ann, 0, None, ch, (0, 0))
        entry[2] = self.slot
        self.stats.annotations_used += 1
        if size[0]:
            if s >= base:
                ch.sizes.setdefault(s - base, size)
            else:
                self.late_sizes.setdefault(s, size)

    # --- finish -------------------------------------------------------------------------
    def finish(self) -> ParseResult:
        names = sorted(self.ctrl, key=self.ctrl.__getitem__)
        cfg = self.config or {}
        controls = list(cfg) + sorted(n for n in names if n not in cfg)
        final_c = {n: i for i, n in enumerate(controls)}
        cmap = np.array([final_c[n] for n in names] + [-1], np.int16)  # [-1] for relations
        seen: dict[str, set[str]] = {n: set() for n in controls}
        for (c, lab) in self.gid:
            seen[names[c]].add(lab)
        labels: dict[str, list[str]] = {}
        for n in controls:
            base = list(cfg.get(n, []))
            extra = sorted(seen[n] - set(base))
            if extra and n in cfg:
                self.stats.labels_not_in_config[n] = extra
            labels[n] = base + extra
        lut = np.array([labels[names[c]].index(lab) for (c, lab) in self.gid] + [-1], np.int32)
        for b in self.groups.values():
            for rows in b.pieces:
                self._remap(rows, cmap, lut)
        self.stats.unknown_types = dict(self.ctx.unknown)
        self.stats.clipped = self.ctx.clipped
        table = build_table(self.samples, self.groups, self.dead, self.late_sizes, controls,
                            labels)
        if self.late_bad:
            tindex = np.concatenate(self.task_index)
            for s, reason in sorted(self.late_bad.items()):
                self.rejected.append(Rejection(int(tindex[s]), int(table.columns["task_id"][s]),
                                               reason))
            table = table.select([i for i in range(table.num_samples) if i not in self.late_bad])
        self.rejected.sort(key=lambda r: r.index)
        self.stats.samples = table.num_samples
        return ParseResult(table, self.rejected, self.stats)

    @staticmethod
    def _remap(rows: Rows, cmap: np.ndarray, lut: np.ndarray) -> None:
        c = rows.fixed["control"]
        rows.fixed["control"] = cmap[c.astype(np.int64)]  # -1 -> last entry (-1)
        if "label" in rows.fixed:
            rows.fixed["label"] = lut[rows.fixed["label"].astype(np.int64)]


def _size(r: dict, val: dict, size: tuple[int, int]) -> tuple[int, int]:
    w = r.get("original_width", val.get("original_width"))
    h = r.get("original_height", val.get("original_height"))
    if w.__class__ is int and h.__class__ is int and w > 0 and h > 0:  # not bools
        return (w, h)
    return size


def _char_to_byte(buf: bytes | bytearray, pos: int) -> int:
    arr = np.frombuffer(buf, np.uint8)
    starts = np.flatnonzero((arr & 0xC0) != 0x80)
    return int(starts[pos]) if pos < starts.size else len(buf)


def _wrapped(mm: mmap.mmap, start: int, end: int) -> bytearray:
    buf = bytearray(end - start + 2)
    buf[0], buf[-1] = 0x5B, 0x5D
    with memoryview(mm) as view:
        buf[1:-1] = view[start:end]  # one copy
    return buf


def _try_load(mm: mmap.mmap, start: int, end: int) -> list | None:
    """The elements in ``mm[start:end]``, or None where that is not a valid JSON list body."""
    try:
        return orjson.loads(_wrapped(mm, start, end))  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:
        return None


def _load(mm: mmap.mmap, start: int, end: int, name: str) -> list:
    buf = _wrapped(mm, start, end)
    try:
        out = orjson.loads(buf)
    except orjson.JSONDecodeError as e:
        if (b"NaN" in buf or b"Infinity" in buf  # Python's json writes these
                or "infinity" in e.msg):  # 1e309: json reads it as inf (and the check rejects)
            try:
                return json.loads(buf)  # type: ignore[no-any-return]
            except ValueError:
                pass
            except RecursionError:  # orjson stops at 1024 levels, json at the stack's limit
                raise UserError(f"{name}: JSON nested too deeply to read (lists or objects "
                                "thousands of levels inside each other) — fix the file or "
                                "export the project again") from None
        at = start - 1 + _char_to_byte(buf, e.pos)
        raise UserError(f"{name}: malformed JSON at byte {at} ({e.msg}) — fix the file or "
                        "export the project again") from None
    return out  # type: ignore[no-any-return]


def parse_export(path: str | os.PathLike[str], *, annotations: Mode = "default",
                 with_predictions: bool = False, labels: dict[str, list[str]] | None = None,
                 out_of_range: Literal["clip", "reject"] = "clip",
                 image_key: str | None = None) -> ParseResult:
    """Parse a Label Studio export file into a ParseResult (coordinates stay in percent).

    Args:
        path: The JSON export (Export > JSON).
        annotations: Which annotations of a task count: ``default`` (latest ground truth,
            else latest), ``latest``, ``ground-truth`` or ``all`` (cancelled ones never count).
        with_predictions: Also keep the tasks' model predictions (``source`` 1).
        labels: Control -> label list from the labeling config; None: the sorted labels seen.
        out_of_range: ``clip`` coordinates to 0..100 (counted) or ``reject`` the task.
        image_key: The task ``data`` key holding the image reference; None: ``image``, else a
            guess.

    Returns:
        The annotation table, the rejected tasks and the statistics.

    Raises:
        UserError: A bad argument, or a file that cannot be read, is empty or is not an
            export (malformed JSON, not a list of tasks).
    """
    p = Path(path)
    name = str(p)
    if out_of_range not in ("clip", "reject"):
        raise UserValueError(f"out_of_range={out_of_range!r}: use clip or reject")
    parser = _Parser(name, annotations, with_predictions, labels, out_of_range == "clip",
                     image_key)
    try:
        f = open(p, "rb")
    except OSError as e:
        error = UserFileNotFoundError if isinstance(e, FileNotFoundError) else UserError
        raise error(f"{name}: cannot read the export ({e.strerror}) — check the path") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise UserError(f"{name}: the file is empty — {NOT_A_LIST}; export the project again")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        collect = gc.isenabled()
        gc.disable()  # millions of acyclic JSON objects: collections would only cost time
        try:
            _run(parser, mm, size, name)
            return parser.finish()
        finally:
            if collect:
                gc.enable()
            try:
                mm.close()
            except BufferError:  # a traceback still holds a view; GC closes the map
                pass


def _run(parser: _Parser, mm: mmap.mmap, size: int, name: str) -> None:
    buf = np.frombuffer(mm, np.uint8)
    target = min(CHUNK_MAX, max(CHUNK_MIN, size // 32))
    index = 0
    freed = 0
    page = mmap.PAGESIZE
    progress = bar(size, desc=f"parse {Path(name).name}", unit="B")
    chunks = fast_chunks(buf, name, target, lambda s, e: _try_load(mm, s, e))
    try:
        for start, end, last, loaded in chunks:
            tasks = _load(mm, start, end, name) if loaded is None else loaded
            del loaded
            if not tasks and (not last or index > 0):
                raise UserError(f"{name}: malformed JSON at byte {end}: empty list element — "
                                "fix the file or export the project again")
            parser.chunk(tasks, index)
            index += len(tasks)
            del tasks
            upto = (end // page) * page
            if upto > freed and hasattr(mmap, "MADV_DONTNEED"):
                mm.madvise(mmap.MADV_DONTNEED, freed, upto - freed)
                freed = upto
            progress.update(end - progress.n)
        progress.update(size - progress.n)  # the closing bracket and whitespace: all read
    finally:
        chunks.close()
        del chunks, buf
        progress.close()


def load_export_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Flavour and size of an export, from its first task (reads only that task)."""
    p = Path(path)
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise UserError(f"{p}: the file is empty — {NOT_A_LIST}")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            buf = np.frombuffer(mm, np.uint8)
            start, end, _ = next(element_chunks(buf, str(p), 0))
            first = _load(mm, start, end, str(p))
            del buf
        finally:
            try:
                mm.close()
            except BufferError:  # a traceback still holds a view; GC closes the map
                pass
    return {"flavour": _flavour(first[0]) if first else "empty", "bytes": size}
