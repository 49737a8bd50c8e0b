"""Names taken from data (manifests, tars, buckets) turned into paths that stay inside a root.

A name read from a file someone else wrote is never joined to a folder as it is:
``safe_name`` accepts only one plain path component (no separator, no ``..``, not absolute,
no NUL, not empty or ``.``), and ``inside`` resolves the joined path (symlinks followed) and
proves it lies inside the resolved root before anything opens, writes or deletes it.
``open_regular`` opens a file for reading only when it is a regular file (a FIFO or a device
never blocks a reader: the open does not wait and the file is refused).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from npu_data.errors import DataCorruption

_SEPARATORS = ("/", "\\", "\0")


class UnsafeName(DataCorruption):
    """A name from data is not one safe path component, or a path leaves its root."""


def unsafe_reason(name: Any) -> str | None:
    """Why ``name`` is not one safe path component (None when it is)."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if name in ("", ".", ".."):
        return "is empty, '.' or '..'"
    if name.startswith(("/", "\\")):
        return "is an absolute path"
    if any(s in name for s in _SEPARATORS):
        return "holds a path separator or a NUL byte"
    if os.path.isabs(name):
        return "is an absolute path"
    if len(name.encode("utf-8", "surrogateescape")) > 255:
        return "is longer than 255 bytes"
    return None


def safe_name(name: Any, where: str, what: str = "name") -> str:
    """``name`` when it is one safe path component; else an ``UnsafeName`` naming ``where``
    (the file it came from) and ``what`` it is (e.g. "shard name")."""
    why = unsafe_reason(name)
    if why is not None:
        shown = repr(name)[:80]
        raise UnsafeName(f"{where}: {what} {shown} {why} — refused (a name from data must be "
                         "one plain file name); the data is damaged or hostile: do not use it")
    return str(name)


def inside(root: str | os.PathLike[str], *names: str, where: str = "") -> Path:
    """``root / names...`` with every name checked by ``safe_name`` and the resolved path
    proven inside the resolved ``root`` (a symlink that leads out is refused).

    Returns the unresolved joined path (what callers name in messages); raises
    ``UnsafeName`` otherwise."""
    base = Path(root)
    path = base
    for name in names:
        path = path / safe_name(name, where or str(base))
    real_root = os.path.realpath(base)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafeName(f"{path}: leads out of {base} (to {real}) — refused; remove the link "
                         "or the data that made it")
    return path


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path`` when it is a regular file (opened without blocking,
    so a FIFO never hangs the caller); ``OSError`` if missing, ``DataCorruption`` if it is a
    FIFO, a device, a socket or a folder. The caller closes the descriptor."""
    fd = os.open(os.fspath(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
                    else "a device or socket")
            raise DataCorruption(f"{path}: is {kind}, not a regular file — refused; replace it "
                                 "with the file the dataset lists (import it again)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of regular file ``path`` (``open_regular``), at most ``limit`` of them
    (``DataCorruption`` when larger)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise DataCorruption(f"{path}: larger than {limit} bytes — refused (not a file "
                             "npu-data wrote)")
    return data
