"""``npu-data import ... --out s3://bucket/prefix``: write locally, upload, manifest last.

The import is written into a staging folder under the cache (``cache_root("upload")/<key of
URL and endpoint>``), then uploaded through fsspec one shard folder at a time (the folder's
files requested together), ``rejected.jsonl`` next and ``manifest.json`` last, so a reader
(``ShardDataset(url)``) never sees a manifest whose files are not all there; a stale remote
manifest that differs is deleted before anything else is uploaded.

An interrupted upload resumes (``--resume``): a file is skipped when the remote object has
its size and either an MD5 ETag equal to the local file's MD5 or the ETag this node recorded
right after uploading it (``.upload.jsonl`` in the staging folder, with the file's sha256).
Split imports (``Group``): each rank uploads its own shards, rank 0 the rest after a barrier.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from npu_data.common.cache import cache_root
from npu_data.common.locks import exclusive
from npu_data.common.oserrors import os_error
from npu_data.errors import UserError
from npu_data.shards.distributed_import import Group
from npu_data.shards.format import MANIFEST, shard_name
from npu_data.shards.lease import LEASE, Lease
from npu_data.shards.storage import RemoteFolder

JOURNAL = ".upload.jsonl"


@dataclass
class UploadSummary:
    """What an upload did: files sent, files already there, bytes sent."""

    files: int = 0
    skipped: int = 0
    bytes: int = 0

    def __add__(self, other: UploadSummary) -> UploadSummary:
        return UploadSummary(self.files + other.files, self.skipped + other.skipped,
                             self.bytes + other.bytes)


def _digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) of a file in one read."""
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            sha.update(block)
            md5.update(block)
    return sha.hexdigest(), md5.hexdigest()


def _etag(info: dict[str, Any]) -> str:
    return str(info.get("ETag") or info.get("etag") or info.get("md5") or "").strip('"')


class Uploader:
    """Uploads of one staging folder to one URL (see the module docstring)."""

    def __init__(self, local: Path, target: RemoteFolder) -> None:
        self.local = local
        self.target = target
        self.journal = self._read_journal()

    def _read_journal(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        try:
            lines = (self.local / JOURNAL).read_bytes().splitlines()
        except OSError:
            return out
        for line in lines:  # a torn last line (killed while appending) is ignored
            try:
                rec = orjson.loads(line)
                out[rec["path"]] = rec
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
        return out

    def remote_listing(self, under: str = "") -> dict[str, dict[str, Any]]:
        """Relative path -> fsspec info of every remote object (under ``under``)."""
        with self.target._remote(under or ".") as (fs, _):
            base = self.target._rpath.rstrip("/")
            where = f"{base}/{under}".rstrip("/")
            fs.invalidate_cache(where)
            if not fs.exists(where):
                return {}
            found = fs.find(where, detail=True)
        return {p[len(base) + 1:]: info for p, info in found.items()
                if p.startswith(base + "/")}

    def files(self, keep: Callable[[str], bool]) -> list[str]:
        """Relative paths of the staged files that ``keep`` selects (no hidden entries, no
        manifest), sorted."""
        out = []
        for p in self.local.rglob("*"):
            rel = p.relative_to(self.local).as_posix()
            if p.is_file() and not any(part.startswith(".") for part in rel.split("/")) \
                    and rel != MANIFEST and keep(rel):
                out.append(rel)
        return sorted(out)

    def upload(self, rels: list[str], listing: dict[str, dict[str, Any]]) -> UploadSummary:
        """Upload ``rels`` (one request batch), skipping those already there intact."""
        todo, sums, done = [], {}, UploadSummary()
        for rel in rels:
            path = self.local / rel
            size = path.stat().st_size
            sha, md5 = sums[rel] = _digests(path)
            info = listing.get(rel)
            if info is not None and int(info.get("size", -1)) == size:
                tag, rec = _etag(info), self.journal.get(rel)
                if tag == md5 or (rec is not None and rec.get("sha256") == sha and tag
                                  and rec.get("etag") == tag and rec.get("size") == size):
                    done.skipped += 1
                    continue
            todo.append(rel)
        if not todo:
            return done
        base = self.target._rpath.rstrip("/")
        with self.target._remote(todo[0]) as (fs, _):
            fs.put([str(self.local / r) for r in todo], [f"{base}/{r}" for r in todo])
        parents = sorted({r.rsplit("/", 1)[0] if "/" in r else "" for r in todo})
        after: dict[str, dict[str, Any]] = {}
        for parent in parents:
            after.update(self.remote_listing(parent) if parent else
                         {r: i for r, i in self.remote_listing().items() if "/" not in r})
        lines = []
        for rel in todo:
            size = (self.local / rel).stat().st_size
            info = after.get(rel)
            if info is None or int(info.get("size", -1)) != size:
                raise UserError(f"{self.target.url}/{rel}: the upload did not arrive whole "
                                f"({size} bytes sent) — run the import again with --resume")
            rec = {"path": rel, "size": size, "sha256": sums[rel][0], "etag": _etag(info)}
            self.journal[rel] = rec
            lines.append(orjson.dumps(rec) + b"\n")
            done.files += 1
            done.bytes += size
        with open(self.local / JOURNAL, "ab") as fh:
            fh.write(b"".join(lines))
        return done

    def upload_shards(self, names: list[str]) -> UploadSummary:
        """The files of shard folders ``names``, one folder (one batch of requests) at a time."""
        total = UploadSummary()
        for name in names:
            rels = self.files(lambda rel, n=name: rel.startswith(f"{n}/"))  # type: ignore[misc]
            if rels:
                total += self.upload(rels, self.remote_listing(name))
        return total

    def upload_rest(self) -> UploadSummary:
        """The top-level files (``rejected.jsonl``), then ``manifest.json`` last."""
        rels = self.files(lambda rel: "/" not in rel)
        listing = {r: i for r, i in self.remote_listing().items() if "/" not in r}
        done = self.upload(rels, listing) if rels else UploadSummary()
        return done + self.upload([MANIFEST], listing)

    def drop_stale_manifest(self) -> None:
        """Delete a remote manifest that is not this import's (before any other upload)."""
        with self.target._remote(MANIFEST) as (fs, rpath):
            if fs.exists(rpath):
                mine = self.local / MANIFEST
                if not mine.is_file() or fs.cat_file(rpath) != mine.read_bytes():
                    fs.rm_file(rpath)


class UrlTarget:
    """``--out URL`` of an import: the staging folder, the checks, the upload. Rank 0 holds
    the node's lock of the staging folder and the URL's lease (``shards.lease``) from the
    start until ``close``: a second import of the URL fails with one line."""

    def __init__(self, url: str, resume: bool, group: Group,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.folder = RemoteFolder(url, storage_options)
        self.url = self.folder.url
        self.group = group
        self.staging = cache_root("upload") / self.folder.ident()
        self._held = contextlib.ExitStack()
        error = None
        if group.rank == 0:
            try:
                self._take()
                self._check(resume)
            except UserError as exc:
                self.close()
                error = str(exc)
            except BaseException:
                self.close()
                raise
        group.agree(error)

    def _take(self) -> None:
        """The staging folder's lock (this node), then the URL's lease (every node)."""
        lockfile = self.staging.with_name(f".{self.staging.name}.lock")
        try:
            lockfile.parent.mkdir(parents=True, exist_ok=True)
            self._held.enter_context(exclusive(
                lockfile, f"{self.url}: another import on this machine is writing it (it "
                f"holds {lockfile}) — wait for it to finish"))
        except OSError as exc:
            raise os_error(exc, lockfile.parent, "or set NPU_DATA_CACHE to a writable "
                           "folder") from None
        lease = Lease(self.folder)
        lease.acquire()
        self._held.callback(lease.release)

    def close(self) -> None:
        """Give back the lease and the lock (idempotent)."""
        self._held.close()

    def _check(self, resume: bool) -> None:
        listing = Uploader(self.staging, self.folder).remote_listing()
        listing.pop(LEASE, None)
        if listing and not resume:
            raise UserError(f"{self.url}: already holds {len(listing)} file(s) — choose an "
                            "empty prefix, or pass --resume to finish an interrupted upload")
        if not resume:  # a fresh import: an earlier staging folder of this URL is stale
            shutil.rmtree(self.staging, ignore_errors=True)

    def local_args(self, args: argparse.Namespace) -> argparse.Namespace:
        """``args`` with ``--out`` pointing at the staging folder."""
        return argparse.Namespace(**{**vars(args), "out": str(self.staging)})

    def upload(self, shards: int) -> UploadSummary:
        """Upload what the import wrote (every rank its shards, rank 0 the rest after them);
        on success the staging folder is removed."""
        up = Uploader(self.staging, self.folder)
        error, done = None, UploadSummary()
        try:
            if self.group.rank == 0:
                up.drop_stale_manifest()
            self.group.barrier()
            done = up.upload_shards([shard_name(k) for k in range(shards) if self.group.mine(k)])
        except UserError as exc:
            error = str(exc)
        self.group.agree(error)
        total = UploadSummary()
        for part in self.group.gather(done):
            total += part
        error = None
        if self.group.rank == 0:
            try:
                total += up.upload_rest()
            except UserError as exc:
                error = str(exc)
        self.group.agree(error)  # no rank returns before the manifest is up
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
            shutil.rmtree(self.staging.with_name(f"{self.staging.name}.wds-media"),
                          ignore_errors=True)  # images unpacked from tars, kept for resume
        return total
