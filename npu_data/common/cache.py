"""The user's cache folder for npu-data (downloads, imported exports, remote shards, kernels)."""

from __future__ import annotations

import os
from pathlib import Path


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
