"""A test's own cache folder (``NPU_DATA_CACHE``) holding the compiled libraries this machine
already built: a process started on it loads the kernels and the codecs instead of building
them into the empty folder (a minute or more of C++ each)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from npu_data import codecs  # noqa: F401  (registers its Library)
from npu_data.common import compiled
from npu_data.common.cache import cache_root
from npu_data.transforms import _native  # noqa: F401  (registers its Library)

HOME = cache_root()  # the machine's cache, read before any test points NPU_DATA_CACHE elsewhere


def seed(cache: Path) -> Path:
    """``cache`` with a copy of each library built in :data:`HOME` (its ``.so`` and its
    ``built`` record, in the folders and modes a build makes); a library not built there is
    left to build as before."""
    for lib in compiled._LIBRARIES:
        key = compiled.build_key(lib.sources + lib.headers)
        src = HOME / lib.folder / key
        if not (src / "built").is_file():
            continue
        dst = cache / lib.folder / key
        for level in (cache, cache / lib.folder, dst):
            level.mkdir(mode=0o700, exist_ok=True)
        for name in (f"{lib.name}.so", "built"):
            shutil.copyfile(src / name, dst / name)
            os.chmod(dst / name, 0o600)
    return cache
