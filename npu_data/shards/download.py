"""Downloads of shard files from a ``RemoteFolder`` into a local folder, each checked
against the manifest before it is kept.

``ShardDownloads`` (the base of ``remote.RemoteStore``) writes each file to a temporary name
inside the shard's folder (``O_EXCL | O_NOFOLLOW``), hashing as it goes and stopping one byte
past the manifest's size, then fsyncs and renames it into place only when size and sha256
match (else nothing is kept). Small files (up to ``SMALL``) of a shard are requested
concurrently on an asynchronous file system (one round trip for the ~100 column files), each
ranged to its size + 1; larger ones are streamed in ``CHUNK`` blocks; a mismatch is retried
once, then a ``DataCorruption`` naming the remote file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from npu_data.common.paths import inside
from npu_data.errors import DataCorruption
from npu_data.shards.storage import RemoteFolder

CHUNK = 8 << 20
SMALL = 16 << 20  # files up to this size are fetched whole, concurrently


class ShardDownloads(RemoteFolder):
    """Checked downloads of the files ``_listing`` names (shard -> file -> {size, sha256}),
    each to ``_file(shard, file)`` (a path the subclass has proven inside its cache)."""

    _listing: dict[str, dict[str, Any]]

    def _file(self, name: str, fname: str) -> Path:
        raise NotImplementedError

    # --- download --------------------------------------------------------------------------
    def _write(self, name: str, fname: str, blocks: Iterable[bytes]) -> bool:
        """Write ``blocks`` as file ``fname`` of shard ``name``: temp name, hashed, fsynced and
        renamed into place when size and sha256 match the manifest (else False, nothing kept)."""
        meta = self._listing[name][fname]
        final = self._file(name, fname)
        tmp = inside(final.parent, f".{fname}.{os.getpid()}.tmp")
        want = int(meta["size"])
        h = hashlib.sha256()
        size = 0
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666)
        try:
            with os.fdopen(fd, "wb") as dst:
                for block in blocks:
                    size += len(block)
                    if size > want:  # a store sending more than the manifest says: stop
                        break
                    h.update(block)
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if size == want and h.hexdigest() == meta["sha256"]:
            os.replace(tmp, final)
            return True
        tmp.unlink(missing_ok=True)
        return False

    def _stream(self, name: str, fname: str) -> None:
        """One file, streamed in ``CHUNK`` blocks; a mismatch is retried once."""
        for _ in range(2):
            with self._remote(f"{name}/{fname}") as (fs, rpath):
                fs.invalidate_cache(rpath)  # no stale size/ETag from an earlier listing
                with fs.open(rpath, "rb") as src:
                    if self._write(name, fname, iter(lambda: src.read(CHUNK), b"")):
                        return
        raise self._mismatch(name, fname)

    def _mismatch(self, name: str, fname: str) -> DataCorruption:
        err = self._user(
            f"{self.shown}/{name}/{fname}: the remote file's size or sha256 differs from the "
            f"manifest ({self._listing[name][fname]['size']} bytes) — the upload is incomplete "
            "or corrupt: upload the dataset folder again (manifest.json last)", DataCorruption)
        assert isinstance(err, DataCorruption)
        return err

    def _download(self, name: str, fnames: list[str]) -> None:
        """Files ``fnames`` of shard ``name``: the small ones requested concurrently (one
        round trip for the ~100 column files on an async file system such as s3fs), the large
        ones streamed; each checked and renamed into place on its own (a kill keeps them)."""
        sizes = self._listing[name]
        small = [f for f in fnames if 0 < int(sizes[f]["size"]) <= SMALL]
        big = [f for f in fnames if f not in small]
        if small:
            got = self._cat_many([f"{name}/{f}" for f in small],
                                 [int(sizes[f]["size"]) for f in small])
            for fname, data in zip(small, got, strict=True):
                if not self._write(name, fname, [data]):
                    self._stream(name, fname)
        for fname in big:
            self._stream(name, fname)

    def _cat_many(self, whats: list[str], sizes: list[int]) -> list[bytes]:
        """The remote files ``whats`` (relative to the URL), requested concurrently where the
        file system is asynchronous (s3fs, gcsfs, ...); each at most one byte more than its
        size in ``sizes`` (the manifest's, > 0: a store that sends more is caught by the size
        check, never buffered whole)."""
        with self._remote(whats[0]) as (fs, _):
            paths = [f"{self._rpath.rstrip('/')}/{w}" for w in whats]
            if getattr(fs, "async_impl", False):
                from fsspec.asyn import sync

                async def cat_all() -> list[Any]:
                    return await asyncio.gather(*(fs._cat_file(p, start=0, end=n + 1)
                                                  for p, n in zip(paths, sizes, strict=True)),
                                                return_exceptions=True)

                got = sync(fs.loop, cat_all)
            else:
                got = [fs.cat_file(p, start=0, end=n + 1)
                       for p, n in zip(paths, sizes, strict=True)]
        for what, data in zip(whats, got, strict=True):
            if isinstance(data, BaseException):
                raise self._error(what, data) from None
        return got
