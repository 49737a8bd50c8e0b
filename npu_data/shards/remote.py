"""Remote datasets: a shard folder on object storage (any fsspec URL) read through a
node-local cache of verified shard files (storage access: ``shards.storage``; the checked
downloads: ``shards.download``; this module: the cache, its locks, eviction and prefetch).

``ShardDataset("s3://bucket/prefix", cache_dir=..., cache_limit="50GB")`` hands its URL to
a ``RemoteStore``, which

- fetches ``manifest.json`` once (in the process that opens the dataset) and keeps a copy in
  the cache folder ``<cache_dir>/<sha256 of the URL and endpoint>[:16]`` (default ``cache_dir``:
  ``common.cache.cache_root("remote")``);
- downloads a shard's files (those the manifest lists) on the shard's first use, each into a
  temporary name in the shard's cache folder, checked against the manifest's size and sha256,
  fsynced and renamed into place (a killed download leaves only a ``.*.tmp`` that the next
  downloader removes; files already complete are kept: the download resumes file by file);
- serialises that per shard and node with ``fcntl.flock`` on ``.locks/<shard>.lock``: every
  process and rank of the node shares one download, the others wait and then map the files;
- records a complete shard in ``.state/<shard>.json`` (its file listing); that file's mtime
  is the least-recently-used clock, and shards are evicted, oldest first, while the complete
  shards exceed ``cache_limit`` bytes (a shard in use by another process — its lock held — is
  skipped; maps already open stay valid after the unlink);
- fetches the dataset-level files a store lists beyond the shards (a latents store's
  ``empty_prompt.*.npy``, ``fetch_root``) whole on first use, checked like a shard's files,
  and never evicts them;
- checks each cached shard on its first open in a process (``cache_check``: ``"sha256"``
  re-hashes every file, ``"size"`` checks sizes only) and fetches a file again when it differs;
- prefetches: ``prefetch(shards)`` (called by ``NpuDistributedSampler`` as its rank enters
  each shard, with the shards it reads next) fetches the next ``prefetch`` shards on a small
  thread pool of the calling process, through the same locks (one download per shard per
  node; a read of a shard being prefetched waits for that download instead of starting its
  own, reads of other shards never wait). Lock descriptors are closed in forked children
  (DataLoader workers) so an inherited descriptor never keeps a lock held.

The endpoint of an S3-compatible store (MinIO, Huawei OBS, ...) comes from
``storage_options={"client_kwargs": {"endpoint_url": ...}}`` or the environment variable
``NPU_DATA_S3_ENDPOINT`` (else ``AWS_ENDPOINT_URL``). Errors are one-line ``UserError`` s
that name the URL and never the credentials. A ``RemoteStore`` pickles without its file
system (rebuilt lazily in each DataLoader worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from npu_data.common.atomic import atomic_write_bytes, fsync_dir
from npu_data.common.cache import cache_root
from npu_data.common.hashing import file_sha256
from npu_data.common.paths import inside
from npu_data.errors import DataCorruption, UserError
from npu_data.shards.download import CHUNK, ShardDownloads
from npu_data.shards.format import MANIFEST
from npu_data.shards.latent_format import root_files
from npu_data.shards.schema import MAX_MANIFEST_BYTES, parse_manifest

T = TypeVar("T")

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


_LOCK_FDS: set[int] = set()  # lock descriptors open in this process
_LOCK_FDS_GUARD = threading.Lock()


def _close_inherited_locks() -> None:
    """In a forked child: drop the parent's lock descriptors (the parent still holds the
    locks; a copy kept open here would keep them held after the parent lets go)."""
    for fd in list(_LOCK_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def parse_bytes(limit: int | str | None) -> int | None:
    """``cache_limit`` in bytes: an int, or a string such as ``"50GB"``, ``"1.5TiB"``."""
    if limit is None or isinstance(limit, int):
        if isinstance(limit, int) and limit < 0:
            raise UserError(f"cache_limit={limit}: must be >= 0 bytes")
        return limit
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(limit))
    if m is None or m.group(2).lower() not in _UNITS:
        raise UserError(f"cache_limit={limit!r}: not a size — write e.g. 50GB, 500MB, 1.5TiB "
                        "or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


class RemoteStore(ShardDownloads):
    """One remote dataset URL and its node-local cache folder (see the module docstring)."""

    def __init__(self, url: str, cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: int | str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 cache_check: str = "sha256", prefetch: int = 2) -> None:
        if cache_check not in ("sha256", "size"):
            raise UserError(f"cache_check={cache_check!r}: use 'sha256' or 'size'")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise UserError(f"prefetch={prefetch!r}: the number of shards to download ahead "
                            "(0 turns prefetching off)")
        self.prefetch_ahead = prefetch
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pending: dict[str, Future[None]] = {}
        self._prefetched: set[str] = set()
        super().__init__(url, storage_options)
        self.cache_limit = parse_bytes(cache_limit)
        self.cache_check = cache_check
        base = Path(cache_dir).expanduser() if cache_dir is not None else cache_root("remote")
        self.root = base / self.ident()  # same bucket name on another store: apart
        self._checked: set[str] = set()  # shards checked in this process
        self.manifest = self._fetch_manifest()
        self._listing = {s["name"]: s["files"] for s in self.manifest["shards"]}
        self._bytes = {name: sum(int(m["size"]) for m in files.values())
                       for name, files in self._listing.items()}
        self._root_listing = root_files(self.manifest)  # fetched by ``fetch_root``

    # --- pickling: no file system, no per-process checks --------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_checked"] = set()
        state["_pool"] = None
        state["_pending"] = {}
        state["_prefetched"] = set()
        return state

    def _fetch_manifest(self) -> dict[str, Any]:
        """The remote manifest, read (at most ``MAX_MANIFEST_BYTES``) and validated
        (``shards.schema``: every name one safe path component) before anything is written;
        then kept as ``manifest.json`` in the cache folder."""
        with self._remote(MANIFEST) as (fs, rpath):
            with fs.open(rpath, "rb") as src:
                data = src.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise self._user(f"{self.shown}/{MANIFEST}: larger than {MAX_MANIFEST_BYTES} "
                             "bytes — refused (not a manifest npu-data wrote)", DataCorruption)
        try:
            manifest = parse_manifest(data, f"{self.shown}/{MANIFEST}")
        except UserError as exc:
            raise self._user(str(exc), type(exc)) from None
        with self._os_errors(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
            local = inside(self.root, MANIFEST)
            if not local.is_file() or local.read_bytes() != data:
                atomic_write_bytes(local, data)
        return manifest

    @contextlib.contextmanager
    def _os_errors(self, path: Path) -> Iterator[None]:
        """An OSError of the cache (full disk, read-only, permissions) as one line naming
        the cache folder and the fix."""
        try:
            yield
        except OSError as exc:
            from npu_data.common.oserrors import os_error

            raise os_error(exc, path, "or pass a cache folder on a writable disk with free "
                           "space (cache_dir / --cache-dir)") from None

    def _folder(self, name: str) -> Path:
        """Shard ``name``'s cache folder, proven inside the cache (``common.paths.inside``)."""
        return inside(self.root, name, where=f"{self.shown}/{MANIFEST}")

    def _file(self, name: str, fname: str) -> Path:
        """File ``fname`` of shard ``name`` in the cache, proven inside it."""
        return inside(self.root, name, fname, where=f"{self.shown}/{MANIFEST}")

    # --- locks and state ------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self, name: str, mode: int) -> Iterator[bool]:
        with self._os_errors(self.root):
            (self.root / ".locks").mkdir(parents=True, exist_ok=True)
            path = inside(self.root / ".locks", f"{name}.lock")
            with _LOCK_FDS_GUARD:  # no fork between the open and the record
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
                _LOCK_FDS.add(fd)
        try:
            try:
                fcntl.flock(fd, mode)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            with _LOCK_FDS_GUARD:
                if fd in _LOCK_FDS:  # not already closed by a fork's child handler
                    _LOCK_FDS.discard(fd)
                    os.close(fd)  # releases the lock

    def _state(self, name: str) -> Path:
        return inside(self.root / ".state", f"{name}.json")

    def _complete(self, name: str) -> bool:
        st = self._state(name)
        try:
            return bool(orjson.loads(st.read_bytes()) == self._listing[name])
        except (OSError, orjson.JSONDecodeError):
            return False

    def _file_ok(self, path: Path, meta: dict[str, Any], full: bool) -> bool:
        try:
            if path.stat().st_size != int(meta["size"]):
                return False
        except OSError:
            return False
        if not full:
            return True
        return file_sha256(path, CHUNK) == meta["sha256"]

    def _bad_files(self, name: str, full: bool) -> list[str]:
        return [f for f, meta in self._listing[name].items()
                if not self._file_ok(self._file(name, f), meta, full)]

    def _repair(self, name: str) -> None:
        """Under the shard's exclusive lock: every listed file present and checked."""
        folder = self._folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        folder = self._folder(name)  # again: now that it exists, proven a folder inside
        for stale in folder.glob(".*.tmp"):  # left by a killed download
            stale.unlink(missing_ok=True)
        full = self.cache_check == "sha256" or not self._complete(name)
        bad = self._bad_files(name, full)
        if bad:
            self._state(name).unlink(missing_ok=True)
        for fname in bad:
            self._file(name, fname).unlink(missing_ok=True)
        if bad:
            self._download(name, bad)
        fsync_dir(folder)
        if bad or not self._complete(name):
            atomic_write_bytes(self._state(name), orjson.dumps(self._listing[name]))
        self._checked.add(name)

    def fetch(self, k: int, opener: Callable[[Path], T]) -> T:
        """Shard ``k`` present and checked in the cache; ``opener(folder)`` runs under the
        shard's shared lock (so no other process evicts it before it is mapped)."""
        name = self.manifest["shards"][k]["name"]
        folder = self._folder(name)
        full = self.cache_check == "sha256"
        for _ in range(3):
            with self._lock(name, fcntl.LOCK_SH):
                if self._complete(name) and not self._bad_files(
                        name, full and name not in self._checked):
                    self._checked.add(name)
                    self._touch(name)
                    return opener(folder)
            with self._lock(name, fcntl.LOCK_EX), self._os_errors(folder):
                self._repair(name)
                self._touch(name)
            self.evict(keep=name)
        raise self._user(f"{self.shown}/{name}: evicted again before it could be opened — "
                         f"raise cache_limit ({self.cache_limit} bytes) above a few shards "
                         f"({self._bytes[name]} bytes each)")

    def fetch_root(self, fname: str) -> Path:
        """Dataset-level file ``fname`` (one the manifest lists beyond the shards,
        ``latent_format.root_files``: a latents store's empty prompt) present and checked in
        the cache folder; its path. Fetched whole (its size is capped by the manifest's
        checks), kept only when size and sha256 match the manifest, written atomically under
        the file's lock; never evicted."""
        meta = self._root_listing.get(fname)
        if meta is None:
            raise self._user(f"{self.shown}/{fname}: not a file {MANIFEST} lists — read the "
                             "files the manifest names", DataCorruption)
        path = inside(self.root, fname, where=f"{self.shown}/{MANIFEST}")
        full = self.cache_check == "sha256" and fname not in self._checked
        with self._lock(fname, fcntl.LOCK_EX), self._os_errors(self.root):
            if not self._file_ok(path, meta, full):
                size = int(meta["size"])
                for _ in range(2):  # a mismatch is fetched once more
                    data = self._cat_many([fname], [size])[0] if size else b""
                    if len(data) == size and hashlib.sha256(data).hexdigest() == meta["sha256"]:
                        atomic_write_bytes(path, data)
                        break
                else:
                    raise self._user(
                        f"{self.shown}/{fname}: the remote file's size or sha256 differs from "
                        f"the manifest ({size} bytes) — the upload is incomplete or corrupt: "
                        "upload the dataset folder again (manifest.json last)", DataCorruption)
            self._checked.add(fname)
        return path

    def fetch_files(self, fname: str, ks: list[int], opener: Callable[[Path], T]) -> list[T]:
        """``opener(path)`` of file ``fname`` (e.g. ``index.npy`` for ``sizes()``) of each
        shard in ``ks``, without the shards' other files: the missing ones requested together
        (one process of the node at a time), each written and opened under its shard's lock."""
        full = self.cache_check == "sha256"
        out: dict[int, T] = {}

        def where(k: int) -> tuple[str, Path, dict[str, Any]]:
            name = self.manifest["shards"][k]["name"]
            return name, self._file(name, fname), self._listing[name][fname]

        for k in ks:
            name, path, meta = where(k)
            with self._lock(name, fcntl.LOCK_SH):
                if self._file_ok(path, meta, full):
                    out[k] = opener(path)
        missing = [k for k in ks if k not in out]
        if not missing:
            return [out[k] for k in ks]
        with self._lock(f".{fname}", fcntl.LOCK_EX):  # one batch per node; the others wait
            missing = [k for k in missing if not self._file_ok(where(k)[1], where(k)[2], False)]
            missing = [k for k in missing if int(where(k)[2]["size"]) > 0]
            got = dict(zip(missing, self._cat_many([f"{where(k)[0]}/{fname}" for k in missing],
                                                   [int(where(k)[2]["size"]) for k in missing])
                           if missing else [], strict=True))
        for k in ks:
            if k in out:
                continue
            name, path, meta = where(k)
            with self._lock(name, fcntl.LOCK_EX), self._os_errors(path.parent):
                if not self._file_ok(path, meta, full):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path = self._file(name, fname)  # the folder now exists: proven again
                    path.unlink(missing_ok=True)
                    if k not in got or not self._write(name, fname, [got[k]]):
                        self._stream(name, fname)
                out[k] = opener(path)
        return [out[k] for k in ks]

    # --- prefetch ----------------------------------------------------------------------------
    def prefetch(self, shards: Sequence[int]) -> None:
        """Fetch ``shards[1:1 + prefetch]`` (``shards[0]``: the shard a rank enters, read now;
        then the ones it reads next) in the background, at most ``prefetch`` at a time;
        returns at once. Shards complete or
        already on their way are skipped; a failed prefetch is left to the read, which reports
        it."""
        if not self.prefetch_ahead:
            return
        if self._pool is None or self._pool_pid != os.getpid():  # never a pool across a fork
            self._pool = ThreadPoolExecutor(self.prefetch_ahead,
                                            thread_name_prefix="npu-data-prefetch")
            self._pool_pid = os.getpid()
            self._pending = {}
        self._pending = {n: job for n, job in self._pending.items() if not job.done()}
        for k in list(shards)[1:1 + self.prefetch_ahead]:
            if len(self._pending) >= self.prefetch_ahead:  # bounded: a shuffled order (every
                break  # sample a new shard) must not queue the whole dataset
            name = self.manifest["shards"][int(k)]["name"]
            if name in self._prefetched or name in self._pending:
                continue
            self._pending[name] = self._pool.submit(self._prefetch_one, int(k))

    def _prefetch_one(self, k: int) -> None:
        name = self.manifest["shards"][k]["name"]
        with contextlib.suppress(Exception):  # the read itself fetches again and reports
            self.fetch(k, lambda folder: None)
            self._prefetched.add(name)

    def wait_prefetch(self) -> None:
        """Block until the prefetches submitted so far have finished (tests, benches)."""
        for job in list(self._pending.values()):
            job.result()

    def _touch(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self._state(name))

    # --- eviction --------------------------------------------------------------------------
    def cached_bytes(self) -> int:
        """Bytes of the complete shards in the cache (manifest sizes)."""
        return sum(self._bytes[n] for n in self._listing if self._state(n).is_file())

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least-recently-used complete shards while the cache is over its limit."""
        if self.cache_limit is None:
            return []
        removed: list[str] = []
        with self._lock(".evict", fcntl.LOCK_EX):
            entries = []
            for n in self._listing:
                with contextlib.suppress(OSError):
                    entries.append((self._state(n).stat().st_mtime_ns, n))
            total = sum(self._bytes[n] for _, n in entries)
            for _, n in sorted(entries):
                if total <= self.cache_limit:
                    break
                if n == keep:
                    continue
                with self._lock(n, fcntl.LOCK_EX | fcntl.LOCK_NB) as got:
                    if not got:  # another process is checking or mapping it
                        continue
                    self._state(n).unlink(missing_ok=True)
                    self._remove(n)
                    self._checked.discard(n)
                    self._prefetched.discard(n)
                total -= self._bytes[n]
                removed.append(n)
        return removed

    def _remove(self, name: str) -> None:
        """Delete shard ``name``'s cache folder: a link planted in its place is unlinked (what
        it points at is never touched), a folder removed only once proven inside the cache."""
        entry = self.root / name
        if entry.is_symlink():
            entry.unlink()
        elif entry.is_dir():
            shutil.rmtree(self._folder(name), ignore_errors=True)

    def shard_bytes(self, k: int) -> int:
        """Bytes of shard ``k``'s files (manifest sizes)."""
        return self._bytes[self.manifest["shards"][k]["name"]]

    def trim(self, open_shards: dict[int, Any]) -> None:
        """Drop the oldest opened shards of a process while they exceed ``cache_limit``
        (their maps close once no sample refers to them; an evicted file's disk space is
        freed then)."""
        if self.cache_limit is None:
            return
        total = sum(self.shard_bytes(j) for j in open_shards)
        while len(open_shards) > 1 and total > self.cache_limit:
            j = next(iter(open_shards))
            del open_shards[j]
            total -= self.shard_bytes(j)

