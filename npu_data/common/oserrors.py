"""Operating-system errors (full disk, read-only file system, permissions) as one-line
``UserError`` s that name the path and the fix."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from npu_data.errors import UserError

_FIXES = {
    errno.ENOSPC: "the disk is full: free space there",
    errno.EDQUOT: "the disk quota is used up: free space there",
    errno.EROFS: "the file system is read-only: use a writable folder",
    errno.EACCES: "permission denied: fix the folder's permissions",
    errno.EPERM: "not permitted: fix the folder's permissions",
    errno.ENAMETOOLONG: "the path is too long: use a shorter folder",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
}


def os_error(exc: OSError, path: str | os.PathLike[str] | None = None,
             fix: str = "") -> UserError:
    """``exc`` as one line: the file it concerns (``exc.filename``, else ``path``), what the
    system said, what to do about it (by errno), then ``fix`` (e.g. "then rerun with
    --resume", "or choose another --out folder")."""
    where = exc.filename if exc.filename is not None else path
    shown = Path(os.fsdecode(where)) if where is not None else "a file"
    text = exc.strerror or str(exc) or type(exc).__name__
    what = _FIXES.get(exc.errno or 0, "")
    what = what.split(": ", 1)[1] if what else ""
    tail = ", ".join(p for p in (what, fix) if p)
    line = f"{shown}: {text}" + (f" — {tail}" if tail else "")
    return UserError(" ".join(line.split()))
