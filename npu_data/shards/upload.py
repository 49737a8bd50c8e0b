"""``npu-data import ... --out s3://bucket/prefix`` (and ``npu-data encode``'s): write
locally, upload, manifest last.

The import is written into a staging folder under the cache (``cache_root("upload")/<key of
URL and endpoint>``), then uploaded through fsspec one shard folder at a time (the folder's
files requested together), ``rejected.jsonl`` next and ``manifest.json`` last, so a reader
(``ShardDataset(url)``) never sees a manifest whose files are not all there; a stale remote
manifest that differs is deleted before anything else is uploaded.

An interrupted upload resumes (``--resume``): a file is skipped when the remote object has
its size and either an MD5 ETag equal to the local file's MD5 or the ETag this node recorded
right after uploading it (``.upload.jsonl`` in the staging folder, with the file's sha256).
Split imports (``Group``): each rank uploads its own shards, rank 0 the rest after a barrier.

The commit fences (as Delta Lake and Iceberg commit): every rank lists the URL once the lease
is taken (``seen``: each object's ETag). An object is written only if absent
(``If-None-Match: *``) or over exactly the version in ``seen`` (``If-Match``: a leftover of the
import whose lease was taken over); an object that appeared or changed since, or a refused
condition, means another import wrote there — this one stops with one line and commits
nothing. The manifest is the commit: written last, the same way, after the lease is checked,
so an import paused past its lease fails at commit and the dataset stays the other import's.
A store without conditional writes (an S3 store answering 501, which a warning reports, or a
non-S3 file system) gets only the lease and these checks, not the fence.
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
from npu_data.shards.storage import Conflict, RemoteFolder, object_tag

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


class Uploader:
    """Uploads of one staging folder to one URL (see the module docstring)."""

    def __init__(self, local: Path, target: RemoteFolder,
                 seen: dict[str, str] | None = None, lease: Lease | None = None) -> None:
        self.local = local
        self.target = target
        self.seen = seen or {}  # relative path -> ETag listed when the lease was taken
        self.lease = lease  # rank 0's
        self.journal = self._read_journal()

    def _taken(self, rel: str) -> UserError:
        """The one line of an object another writer wrote since the lease was taken."""
        if self.lease is not None:
            try:
                self.lease.check()
            except UserError as lost:
                return lost
            return UserError(f"{self.target.shown}/{rel}: another import wrote it after this "
                             "one took the dataset's lease (one that lost the lease, still "
                             "running) — this import stops without committing; run it again "
                             "with --resume once that import has stopped")
        return UserError(f"{self.target.shown}/{rel}: another import wrote it after this one "
                         "took the dataset's lease (this one was paused past its lease, or "
                         "the lease object was deleted) — this import stops without "
                         "committing; the dataset stands as the other left it (check it "
                         f"with `npu-data verify {self.target.shown}`)")

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
        replace: list[str | None] = []
        for rel in rels:
            path = self.local / rel
            size = path.stat().st_size
            sha, md5 = sums[rel] = _digests(path)
            info = listing.get(rel)
            if info is not None:
                tag, rec = object_tag(info), self.journal.get(rel)
                if int(info.get("size", -1)) == size and (tag == md5 or (
                        rec is not None and rec.get("sha256") == sha and tag
                        and rec.get("etag") == tag and rec.get("size") == size)):
                    done.skipped += 1
                    continue
                if self.seen.get(rel) != tag:  # not the leftover this import inherited
                    raise self._taken(rel)
            todo.append(rel)
            replace.append(None if info is None else object_tag(info))
        if not todo:
            return done
        try:
            self.target.write(todo, [self.local / r for r in todo], replace)
        except Conflict as exc:
            raise self._taken(getattr(exc, "rel", "") or todo[0]) from None
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
            rec = {"path": rel, "size": size, "sha256": sums[rel][0], "etag": object_tag(info)}
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
        """Delete a remote manifest that is not this import's (before any other upload): only
        the version listed when the lease was taken."""
        stamp = self.target.stamp(MANIFEST)
        if stamp is None:
            return
        mine = self.local / MANIFEST
        with self.target._remote(MANIFEST) as (fs, rpath):
            try:
                same = mine.is_file() and fs.cat_file(rpath) == mine.read_bytes()
            except FileNotFoundError:  # deleted since: not by this import
                raise self._taken(MANIFEST) from None
        if same:
            return
        if self.seen.get(MANIFEST) != stamp.etag:
            raise self._taken(MANIFEST)
        try:
            self.target.delete(MANIFEST, stamp.etag)
        except Conflict:
            raise self._taken(MANIFEST) from None


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
        self.lease: Lease | None = None
        self.seen: dict[str, str] = {}
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
        error = None
        try:  # every rank: what is there once the lease is held (see the module docstring)
            self.seen = {rel: object_tag(info) for rel, info in
                         Uploader(self.staging, self.folder).remote_listing().items()}
        except UserError as exc:
            error = str(exc)
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
        self.lease = lease

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
        up = Uploader(self.staging, self.folder, self.seen, self.lease)
        error, done = None, UploadSummary()
        try:
            if self.lease is not None:
                self.lease.check()
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
        if self.lease is not None:
            try:
                self.lease.check()  # the early word; the conditional writes are the fence
                total += up.upload_rest()
            except UserError as exc:
                error = str(exc)
        self.group.agree(error)  # no rank returns before the manifest is up
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
            shutil.rmtree(self.staging.with_name(f"{self.staging.name}.wds-media"),
                          ignore_errors=True)  # images unpacked from tars, kept for resume
        return total
