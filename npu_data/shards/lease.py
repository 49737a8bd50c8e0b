"""A lease object on object storage: one writer of a dataset URL at a time.

An import into ``s3://bucket/prefix`` first takes ``<prefix>/.npu-data-import.lease``, a
small JSON object ``{"owner", "token", "expires"}``: created exclusively where the store
supports it (``If-None-Match: *``), then read back — the writer whose token is there holds
it. A lease whose ``expires`` (the holder's clock, seconds since the epoch) is past may be
taken over: the holder renews it every ``ttl / 4`` seconds from a thread while it works, so
only a writer that died leaves an expired lease; one whose holder ran on this machine and is
gone (its process id no longer exists) is taken over at once (a killed import resumes). A second importer fails with one line that
names the holder and the lease object (delete it by hand only when that import is dead).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

import orjson

from npu_data.errors import UserError
from npu_data.shards.storage import RemoteFolder

LEASE = ".npu-data-import.lease"
TTL = 600.0  # seconds a lease lasts unless renewed


class Lease:
    """The import lease of ``folder`` (``acquire``, ``release``; renewed in the background)."""

    def __init__(self, folder: RemoteFolder, ttl: float = TTL) -> None:
        self.folder = folder
        self.ttl = float(ttl)
        self.token = uuid.uuid4().hex
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shown(self) -> str:
        return f"{self.folder.shown}/{LEASE}"

    def _read(self) -> dict[str, Any] | None:
        with self.folder._remote(LEASE) as (fs, rpath):
            fs.invalidate_cache(rpath)
            try:
                data = fs.cat_file(rpath)
            except FileNotFoundError:
                return None
        try:
            got = orjson.loads(data)
        except orjson.JSONDecodeError:
            return {}
        return got if isinstance(got, dict) else {}

    def _record(self) -> bytes:
        return orjson.dumps({"owner": self.owner, "token": self.token,
                             "expires": time.time() + self.ttl})

    def _write(self, create: bool) -> None:
        """Write this writer's lease: ``create`` exclusively where the store can (else, when
        the store refused the condition and nothing is there yet, plainly)."""
        with self.folder._remote(LEASE) as (fs, rpath):
            if create:
                try:  # exclusive where the store knows If-None-Match (AWS S3, MinIO, ...)
                    fs.pipe_file(rpath, self._record(), mode="create")
                    return
                except TypeError:  # an fsspec without the mode argument
                    pass
                except Exception:  # noqa: BLE001 - taken first, or the condition unsupported
                    if self._read() is not None:
                        return  # someone created it first: the read-back decides
            fs.pipe_file(rpath, self._record())

    def _busy(self, held: dict[str, Any]) -> UserError:
        until = held.get("expires")
        when = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(until))
                if isinstance(until, (int, float)) else "?")
        return UserError(f"{self.shown}: another import ({held.get('owner', '?')}) is writing "
                         f"{self.folder.shown} (its lease runs until {when}) — wait for it to "
                         "finish; delete the lease object only if that import died")

    def acquire(self) -> None:
        """Take the lease (a ``UserError`` naming the holder when another import has it) and
        keep renewing it until ``release``."""
        held = self._read()
        now = time.time()
        if held and held.get("token") != self.token and isinstance(held.get("expires"),
                                                                   (int, float)) \
                and held["expires"] > now and not _dead_here(held.get("owner")):
            raise self._busy(held)
        self._write(create=held is None)
        got = self._read()
        if not got or got.get("token") != self.token:
            raise self._busy(got or {})
        self._thread = threading.Thread(target=self._renew, name="npu-data-lease",
                                        daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                got = self._read()
                if got and got.get("token") == self.token:
                    self._write(create=False)
            except Exception:  # noqa: BLE001 - the next renewal tries again
                continue

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still this writer's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            got = self._read()
            if got and got.get("token") == self.token:
                with self.folder._remote(LEASE) as (fs, rpath):
                    fs.rm_file(rpath)
        except UserError:
            pass  # expires by itself


def _dead_here(owner: Any) -> bool:
    """Whether lease ``owner`` (``host:pid``) was a process of this machine that is gone."""
    if not isinstance(owner, str) or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive (another user's)
    return False
