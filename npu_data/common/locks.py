"""An exclusive lock on a folder's work: an ``fcntl.flock`` on a lock file, held for a block.

``exclusive(lockfile, busy)`` takes the lock without waiting: when another process holds it,
a one-line ``UserError`` (``busy``) says so. The kernel drops the lock when its holder exits
(even killed), so a stale lock file never blocks anyone. Within one process the lock is
re-entrant (an import's CLI and its ``write_dataset`` take the same lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from npu_data.errors import UserError

_HELD: dict[str, list[int]] = {}  # real path -> [descriptor, depth] of the locks held here
_GUARD = threading.Lock()


@contextlib.contextmanager
def exclusive(lockfile: str | os.PathLike[str], busy: str,
              remove: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``lockfile`` (created if missing) for the block; a
    ``UserError(busy)`` when another process holds it. ``remove``: delete the lock file when
    done (a process that opened it just before keeps a lock on a file no longer there, so the
    taker checks that the file it locked is still the one at the path)."""
    path = Path(lockfile)
    key = os.path.realpath(path)
    with _GUARD:
        held = _HELD.get(key)
        if held is not None and held[1] > 0 and _same_pid(held):
            held[1] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _GUARD:
                _HELD[key][1] -= 1
        return
    fd = _take(path, busy)
    with _GUARD:
        _HELD[key] = [fd, 1, os.getpid()]
    try:
        yield
    finally:
        with _GUARD:
            _HELD.pop(key, None)
        if remove:
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(fd)  # releases the lock


def _take(path: Path, busy: str) -> int:
    """A descriptor of ``path`` holding its exclusive lock (UserError(busy) if held)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BlockingIOError:
            os.close(fd)
            raise UserError(busy) from None
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)  # locked a file its holder removed meanwhile: lock the new one


def _same_pid(held: list[int]) -> bool:
    return len(held) > 2 and held[2] == os.getpid()  # a forked child holds nothing
