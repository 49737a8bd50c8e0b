"""The user's cache folder for npu-data (downloads, imported exports, remote shards, kernels)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from npu_data.errors import UserError


def cache_root(*parts: str) -> Path:
    """``$NPU_DATA_CACHE``, else ``$XDG_CACHE_HOME/npu-data`` (when absolute), else
    ``~/.cache/npu-data``; joined with ``parts`` (e.g. ``cache_root("downloads")``)."""
    env = os.environ.get("NPU_DATA_CACHE")
    if env:
        base = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
        base = root / "npu-data"
    return base.joinpath(*parts)


def private_dir(path: Path, what: str = "the cache") -> Path:
    """``path`` as a folder of this user: made 0700 (only this user can read it) where it is
    missing; a folder that exists is used as it is, never changed (it may be shared, as
    ``/tmp``). UserError naming ``what`` if it is not a folder, belongs to another user, or
    others can write it without the sticky bit (they could rename or replace its entries)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
        return path  # made here: 0700 (a umask only takes bits away)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path}: {what} is not a folder — remove it or pass another cache "
                        "folder")
    if st.st_uid != os.getuid():
        raise UserError(f"{path}: {what} belongs to another user — refused; pass a cache "
                        "folder of your own")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UserError(f"{path}: {what} is writable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}) — refused, its mode is left as it is; "
                        "close it (chmod go-w) or pass a cache folder of your own")
    return path
