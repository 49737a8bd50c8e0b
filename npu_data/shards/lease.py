"""A lease object on object storage: one writer of a dataset URL at a time.

An import into ``s3://bucket/prefix`` first takes ``<prefix>/.npu-data-import.lease``, a
small JSON object ``{"owner", "token", "ttl", "expires"}``: created only if absent
(``If-None-Match: *``) where the store has conditional writes, then read back — the writer
whose token is there holds it. The holder rewrites it every ``ttl / 4`` seconds from a thread
(``If-Match`` on the version it wrote last). Whether a lease has expired is judged by the
store's clock alone: the object's age (the store's ``Date`` minus its ``Last-Modified``)
against its ``ttl`` (whole seconds on S3, so a ttl is a few seconds at least) — no two nodes'
clocks are compared (``expires``, the holder's clock, is only shown to people). An expired lease is taken over with ``If-Match`` on the version judged
expired; one whose holder ran on this machine and is gone (its process id no longer exists) at
once (a killed import resumes). A second importer fails with one line that names the holder
and the lease object (delete it by hand only when that import is dead).

A lease alone cannot stop a writer that was paused past it (it still believes it holds it):
``shards.upload`` fences every write with a condition, so such a writer fails at its next
write. A renewal that fails is logged; one refused because another import took the lease over
marks it ``lost``, and ``check`` then raises.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Any

import orjson

from npu_data.common.text import one_line
from npu_data.errors import UserError
from npu_data.shards.storage import Conflict, RemoteFolder, Stamp

LEASE = ".npu-data-import.lease"
TTL = 600.0  # seconds a lease lasts unless renewed
MAX_TTL = 7 * 24 * 3600.0  # a longer ttl in a lease object is not one npu-data wrote
log = logging.getLogger(__name__)


class ForeignLease(UserError):
    """A lease object npu-data did not write (its one line says to delete it by hand)."""


class Lease:
    """The import lease of ``folder`` (``acquire``, ``check``, ``release``; renewed in the
    background)."""

    def __init__(self, folder: RemoteFolder, ttl: float | None = None) -> None:
        self.folder = folder
        self.ttl = float(TTL if ttl is None else ttl)
        self.token = uuid.uuid4().hex
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.etag: str | None = None  # the version of the lease object this writer wrote last
        self.lost: str | None = None  # why this writer no longer holds it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shown(self) -> str:
        return f"{self.folder.shown}/{LEASE}"

    def _foreign(self, why: str) -> UserError:
        return ForeignLease(f"{self.shown}: not an import lease npu-data wrote ({why}) — delete it "
                         f"by hand if no import of {self.folder.shown} is running")

    def _parse(self, data: bytes) -> dict[str, Any]:
        try:
            got = orjson.loads(data)
        except orjson.JSONDecodeError:
            got = None
        if not isinstance(got, dict) or not isinstance(got.get("token"), str) \
                or not isinstance(got.get("owner"), str):
            raise self._foreign("not a JSON object with an owner and a token")
        for key, top in (("ttl", MAX_TTL), ("expires", 1e11)):
            value = got.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not math.isfinite(value) or not 0 < value <= top):
                raise self._foreign(f"{key} {str(value)[:40]!r} is not a time in range")
        return got

    def _read(self) -> tuple[dict[str, Any], Stamp] | None:
        """The lease record and its stamp (ETag, age by the store's clock); None if absent."""
        stamp = self.folder.stamp(LEASE)  # first: a record read after it is never older
        if stamp is None:
            return None
        with self.folder._remote(LEASE) as (fs, rpath):
            try:
                data = fs.cat_file(rpath)
            except FileNotFoundError:
                return None
        return self._parse(data), stamp

    def _record(self) -> bytes:
        return orjson.dumps({"owner": self.owner, "token": self.token, "ttl": self.ttl,
                             "expires": time.time() + self.ttl})

    def _busy(self, held: dict[str, Any], left: float) -> UserError:
        owner = one_line(held.get("owner", "?"), 80)  # the store's text: bounded, escaped
        return UserError(f"{self.shown}: another import ({owner}) is writing "
                         f"{self.folder.shown} (its lease runs {max(left, 0):.0f} s more "
                         "unless renewed) — wait for it to finish; delete the lease object "
                         "only if that import died")

    def acquire(self) -> None:
        """Take the lease (a ``UserError`` naming the holder when another import has it) and
        keep renewing it until ``release``."""
        now = self._read()
        replace = None
        if now is not None:
            held, stamp = now
            ttl = float(held.get("ttl") or TTL)
            if held["token"] != self.token and stamp.age < ttl \
                    and not _dead_here(held["owner"]):
                raise self._busy(held, ttl - stamp.age)
            replace = stamp.etag  # exactly the version judged expired
        try:
            self.folder.write([LEASE], [self._record()], [replace])
        except Conflict:
            pass  # another import took it first: the read-back names it
        got = self._read()
        if got is None or got[0]["token"] != self.token:
            held, stamp = got if got is not None else ({}, Stamp("", 0.0))
            raise self._busy(held, float(held.get("ttl") or TTL) - stamp.age)
        self.etag = got[1].etag
        self._thread = threading.Thread(target=self._renew, name="npu-data-lease",
                                        daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        failing = False
        while not self._stop.wait(self.ttl / 4):
            try:
                if not self.folder.conditional():  # no If-Match: read, then write
                    got = self._read()
                    if got is None or got[0]["token"] != self.token:
                        raise Conflict("taken over")
                self.folder.write([LEASE], [self._record()], [self.etag])
                stamp = self.folder.stamp(LEASE)
                self.etag = stamp.etag if stamp is not None else self.etag
                failing = False
            except Conflict:
                self.lost = "another import took it over"
                log.warning("npu-data: %s: %s — this import writes nothing more",
                            self.shown, self.lost)
                return
            except Exception as exc:  # noqa: BLE001 - said once, then tried again
                if not failing:
                    log.warning("npu-data: %s: could not renew the import lease (%s); trying "
                                "again every %.0f s", self.shown, exc, self.ttl / 4)
                failing = True

    def check(self) -> None:
        """A one-line ``UserError`` when this writer no longer holds the lease."""
        if self.lost is None:
            try:
                got = self._read()  # the store unreachable: its own one line
            except ForeignLease as exc:
                got, self.lost = None, str(exc)
            if self.lost is None and (got is None or got[0]["token"] != self.token):
                self.lost = "another import took it over" if got else "it was deleted"
        if self.lost is not None:
            raise UserError(f"{self.folder.shown}: this import lost its lease ({self.lost}; it "
                            f"was paused or cut off longer than the lease's {self.ttl:.0f} s) "
                            "— it stops without committing; the dataset stands as the other "
                            f"import left it (check it with `npu-data verify "
                            f"{self.folder.shown}`)")

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still this writer's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.etag is None or self.lost is not None:
            return
        try:
            got = self._read()
            if got is not None and got[0]["token"] == self.token:
                self.folder.delete(LEASE, got[1].etag)
        except UserError:
            pass  # expires by itself


def _dead_here(owner: Any) -> bool:
    """Whether lease ``owner`` (``host:pid``) was a process of this machine that is gone."""
    if not isinstance(owner, str) or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isascii() or not pid.isdigit() \
            or len(pid) > 10 or not 0 < int(pid) < 2**31:  # kill() takes a C int
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive (another user's)
    return False
