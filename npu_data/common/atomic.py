"""Atomic writes: temporary file in the same folder, fsync, rename, fsync of the folder."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry (so a rename inside it survives a crash)."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], private: bool = False,
                suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A file handle whose content replaces ``path`` only when the block ends without an
    error (temporary file beside it, fsync, rename, fsync of the folder); on an error nothing
    is kept. ``private``: mode 0600, for the user's own caches."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            if not private:  # mkstemp's 0600 is not what users expect of a dataset
                os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | memoryview,
                       private: bool = False) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one
    (``private``: mode 0600, for the user's own caches)."""
    with atomic_file(path, private) as fh:
        fh.write(data)


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` serialisation of ``array`` (no pickle; object arrays refused)."""
    if array.dtype.hasobject:
        raise TypeError("object arrays cannot be stored: use numeric or byte columns")
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def atomic_save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Save ``array`` as ``.npy`` atomically."""
    atomic_write_bytes(path, npy_bytes(array))
