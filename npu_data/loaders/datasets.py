"""LabelStudioDataset: a Label Studio export served as ShardDataset samples via a shard cache.

The first use imports the export into ``<cache_dir>/<key>`` where ``key`` is the sha256 of
the export bytes and the import options; later runs open that folder instantly. The import
writes into ``<key>.partial`` under an exclusive file lock and renames it into place when
complete, so a concurrent import waits and a killed one is resumed, never served half-done.

``transform`` is applied by npu_data's DataLoader, batched on the device; read any other way
(torch's own DataLoader, ``dataset[i]``) the dataset applies it itself on the host
(``loaders.host_transform``), so torch's loader gets transformed samples it can stack.

A damaged cache entry is never served: one whose manifest fails its checks is set aside
(``<key>.damaged``, with a warning) and the export imported again; a damaged shard file
found later is a ``DataCorruption`` that says to delete the entry, which the next use
imports again.

Rejected tasks are never silent: ``dataset.rejected`` lists them (as in the cache's
``rejected.jsonl``), an import that rejected some warns with the counts, and one that kept
no sample raises ``UserError`` naming the reasons and the fix, and leaves no cache entry.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import orjson

from npu_data.batch import BatchRequest
from npu_data.common.cache import cache_root, private_dir
from npu_data.common.hashing import file_sha256
from npu_data.errors import (
    DataCorruption,
    UserError,
    UserFileNotFoundError,
    UserTypeError,
    keyword,
    spelled_as,
)
from npu_data.loaders import host_transform
from npu_data.shards.batch_read import check_field

_NOT_KEYED = ("workers", "download_workers", "timeout")  # how, not what, is imported
_REPORT = "rejected.jsonl"  # npu_data.shards.format.REJECTED


def _read_report(path: Path) -> list[dict[str, Any]]:
    """The rejections listed in a ``rejected.jsonl`` report (empty when there is none)."""
    if not path.is_file():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _reasons(rejected: list[dict[str, Any]], most: int = 3) -> list[str]:
    """The first ``most`` distinct reasons (``<ref>: <why>`` counted once per ``<why>``)."""
    seen: dict[str, str] = {}
    for r in rejected:
        reason = _one_line(r.get("reason", ""))
        seen.setdefault(reason.split(": ", 1)[-1], reason)
        if len(seen) == most:
            break
    return list(seen.values())


def _tasks(rejected: list[dict[str, Any]]) -> int:
    return len({r.get("index") for r in rejected})


class LabelStudioDataset:
    """Samples of a Label Studio export (``ShardDataset`` dicts), imported once and cached.

    npu_data's DataLoader applies ``transform`` on the device to whole batches; torch's
    DataLoader, or ``dataset[i]``, gets it applied here on the host (exact, slower; module doc).

    Args:
        json_file: The JSON export (Export > JSON).
        images_root: The folder image references resolve against.
        transform: A batch transform (``npu_data.transforms``, e.g. ``NpuPreprocessor``).
        cache_dir: Where the imported shards are kept; default ``$NPU_DATA_CACHE/datasets``
            (else ``$XDG_CACHE_HOME/npu-data/datasets``, else ``~/.cache/npu-data/datasets``).
        store: ``"raw"`` (decoded pixels, fastest to read) or ``"encoded"`` (the original
            file bytes, smallest) shards.
        max_side: Shrink images so the longest side is at most this (annotations follow);
            None: keep the size.
        caption_field: The task data key holding each sample's caption; None: the first
            TextArea text, else the task data's ``caption``, ``text`` or ``prompt``.
        **options: The other options of ``npu-data import``, as keywords, checked as it checks
            them: ``ls_data_dir``, ``local_files_root``, ``allow_download`` (host names),
            ``storage_endpoint``, ``download_workers``, ``max_download_bytes``, ``timeout``,
            ``reencode``, ``shard_size``, ``annotations``, ``with_predictions``, ``config``,
            ``reject_out_of_range``, ``strict``, ``workers``, ``restart_markers``,
            ``max_pixels`` (an image of more pixels is rejected from its header).

    Raises:
        UserError: An export that does not exist, or an option ``npu-data import`` would
            reject (one line, before anything is read).
    """

    serves_requests = True  # npu_data's DataLoader asks for BatchRequests: raw samples

    def __init__(self, json_file: str | os.PathLike[str],
                 images_root: str | os.PathLike[str] | None = None, transform: Any = None,
                 cache_dir: str | os.PathLike[str] | None = None, store: str = "raw",
                 max_side: int | None = None, caption_field: str | None = None,
                 **options: Any) -> None:
        self.json_file = Path(json_file)
        if not self.json_file.is_file():
            raise UserFileNotFoundError(f"{self.json_file}: export not found — pass the path "
                                        "of a Label Studio JSON export (Export > JSON)")
        if transform is not None and not callable(transform):
            raise UserTypeError(f"LabelStudioDataset: transform={transform!r} is not callable — "
                                "pass a batch transform (npu_data.transforms) or None")
        self.transform = transform
        self.images_root = Path(images_root).resolve() if images_root else None
        self.store, self.max_side, self.options = store, max_side, options
        self.caption_field = check_field(caption_field, "LabelStudioDataset")
        from npu_data.shards.importer import OPTIONS, import_options

        import_options(self.json_file, allowed=tuple(o for o in OPTIONS if o != "resume"),
                       **self._import_options())  # the CLI's checks, now (the cache resumes)
        self._default_cache = not cache_dir
        self.cache_dir = Path(cache_dir) if cache_dir else cache_root("datasets")
        self.key = self._key()
        self.path = self.cache_dir / self.key
        self._ds: Any = None
        self._rejected: list[dict[str, Any]] = []

    def _key(self) -> str:
        record = {"export_sha256": file_sha256(self.json_file), "store": self.store,
                  "max_side": self.max_side,
                  "images_root": os.fspath(self.images_root or self.json_file.resolve().parent),
                  **{k: (os.fspath(Path(v).resolve()) if k in ("ls_data_dir", "local_files_root",
                                                                "config") else v)
                     for k, v in sorted(self.options.items()) if k not in _NOT_KEYED}}
        return hashlib.sha256(orjson.dumps(record, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]

    def _import_options(self) -> dict[str, Any]:
        """The keywords of ``shards.importer.import_dataset`` (which checks them)."""
        return {"images_root": self.images_root, "store": self.store,
                "max_side": self.max_side, **self.options}

    def _import(self) -> None:
        from npu_data.shards.importer import import_dataset

        if self._default_cache:  # imported images are the user's data: 0700 like downloads
            private_dir(self.cache_dir, "the dataset cache")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / f"{self.key}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent import finishes first
            if (self.path / "manifest.json").is_file():
                return
            partial = self.cache_dir / f"{self.key}.partial"
            with spelled_as(keyword):  # reasons name keywords of this class, never flags
                summary = import_dataset(self.json_file, partial, resume=partial.exists(),
                                         **self._import_options())
            if summary.samples == 0 and summary.rejected:
                report = self.cache_dir / f"{self.key}.{_REPORT}"
                os.replace(summary.rejected_path, report)
                shutil.rmtree(partial, ignore_errors=True)  # no empty cache entry is left
                self._fail(_read_report(report), summary.tasks, report)
            os.replace(partial, self.path)

    def _set_aside(self, damage: DataCorruption) -> None:
        """Move the damaged cache entry to ``<key>.damaged`` (one kept, for a look) and warn."""
        aside = self.cache_dir / f"{self.key}.damaged"
        with (self.cache_dir / f"{self.key}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            shutil.rmtree(aside, ignore_errors=True)
            if self.path.exists():
                os.replace(self.path, aside)
        warnings.warn(f"{self.json_file}: its cache entry is damaged ({_one_line(str(damage))})"
                      f" — importing the export again; the damaged copy is in {aside}",
                      UserWarning, stacklevel=4)

    def _fail(self, rejected: list[dict[str, Any]], tasks: int, report: Path) -> None:
        reasons = _reasons(rejected)
        raise UserError(f"{self.json_file}: all {_tasks(rejected)} of {tasks} task(s) rejected, "
                        f"no sample kept — {'; '.join(reasons)} — pass LabelStudioDataset what "
                        "they name (images_root=, local_files_root= or ls_data_dir= for image "
                        f"references), or fix the tasks (every rejection: {report})")

    def _report(self, ds: Any) -> None:
        """Expose the import's rejections; raise if nothing was kept, warn if some were lost."""
        report = self.path / _REPORT
        self._rejected = _read_report(report)
        if not self._rejected:
            return
        tasks = int(ds.manifest["counts"].get("tasks", len(ds)))
        if len(ds) == 0:  # an empty entry from an older version: as loud as a fresh import
            self._fail(self._rejected, tasks, report)
        reasons = _reasons(self._rejected, most=1)
        warnings.warn(f"{self.json_file}: {_tasks(self._rejected)} of {tasks} task(s) rejected "
                      f"({len(self._rejected)} sample(s)), {len(ds)} sample(s) kept — first: "
                      f"{reasons[0]} — see {report} or dataset.rejected", UserWarning,
                      stacklevel=4)

    @property
    def rejected(self) -> list[dict[str, Any]]:
        """The rejected tasks as in ``rejected.jsonl`` (``index``, ``task_id``, ``reason``)."""
        self.dataset  # noqa: B018 - opening the dataset reads the report
        return self._rejected

    @property
    def dataset(self) -> Any:
        """The underlying ``ShardDataset`` (imports the export on first use)."""
        if self._ds is None:
            from npu_data.shards.reader import ShardDataset

            if not (self.path / "manifest.json").is_file():
                self._import()
            fix = (f"delete the cache entry {self.path} — LabelStudioDataset imports the export "
                   "into it again on its next use")
            try:
                ds = ShardDataset(self.path, fix=fix, caption_field=self.caption_field)
            except DataCorruption as exc:  # a damaged entry's manifest: set aside, imported anew
                self._set_aside(exc)
                self._import()
                ds = ShardDataset(self.path, fix=fix, caption_field=self.caption_field)
            self._report(ds)
            self._ds = ds
        return self._ds

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int | BatchRequest) -> dict[str, Any]:
        """Sample ``i``: raw for npu_data's DataLoader (which asks for a one-sample
        ``BatchRequest``), else transformed (module doc)."""
        if isinstance(i, BatchRequest):
            return self.dataset[i.indices[0]]  # type: ignore[no-any-return]
        raw = self.dataset[i]
        if self.transform is None:
            return raw
        return host_transform.sample(
            host_transform.transformed(self.transform, [raw], type(self).__name__))

    def __getitems__(self, indices: list[int]) -> Any:
        """A whole batch read column-wise (what torch's DataLoader asks a worker for): a
        lazy ``HostBatch`` for npu_data's DataLoader (which asks with a ``BatchRequest``), else
        the transformed batch's rows."""
        raw = self.dataset.__getitems__(indices)
        if self.transform is None or isinstance(indices, BatchRequest):
            return raw
        return host_transform.rows(
            host_transform.transformed(self.transform, raw, type(self).__name__))

    def __getstate__(self) -> dict[str, Any]:
        self.dataset  # noqa: B018 - import in the parent, never in each worker
        return dict(self.__dict__)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dataset, name)  # labels, controls, sizes(), ...
