"""Building npu-data's C++ libraries on first use (torch's extension builder), once per
machine, into ``cache_root(<folder>, <key>)``; the key covers the sources, the headers, torch's
version, the flags and the CPU. ``include/`` holds the headers the libraries share
(``parallel.h``: a batch's samples spread over torch's thread pool)."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import platform
import shutil
import stat
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import torch

from npu_data.common import compat
from npu_data.common.atomic import atomic_write_bytes
from npu_data.common.cache import cache_root
from npu_data.errors import UserError

INCLUDE = Path(__file__).parent / "include"
log = logging.getLogger(__name__)
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp-simd"]
# NPU_DATA_SIMD picks a build: "native" (default: the hand-written SSE2 / AVX-512 / NEON paths
# where the CPU has them, the rest auto-vectorised), "portable" (no hand-written paths: what a
# CPU without them runs) or "scalar" (no vectorisation at all). All give the same bytes.
VARIANTS = {
    "native": [],
    "portable": ["-DNPU_DATA_PORTABLE"],
    "scalar": ["-DNPU_DATA_PORTABLE", "-DNPU_DATA_SCALAR", "-fno-tree-vectorize",
               "-fno-tree-slp-vectorize"],
}
# the CPU's identity as /proc/cpuinfo gives it: x86's model and flags, ARM's implementer,
# part, variant and features (a -march=native build is only valid on a CPU that matches)
_CPU_KEYS = ("model name", "flags", "Features", "CPU implementer", "CPU architecture",
             "CPU variant", "CPU part")


def variant() -> str:
    """The build ``NPU_DATA_SIMD`` asks for (see :data:`VARIANTS`)."""
    name = os.environ.get("NPU_DATA_SIMD", "native") or "native"
    if name not in VARIANTS:
        raise UserError(f"NPU_DATA_SIMD={name!r}: use one of {', '.join(VARIANTS)}")
    return name


def flags() -> list[str]:
    """The compiler flags of the build :func:`variant` names."""
    extra = VARIANTS[variant()]
    base = [f for f in FLAGS if not (f == "-fopenmp-simd" and "-DNPU_DATA_SCALAR" in extra)]
    return base + extra


def cpu_signature(cpuinfo: Iterable[str]) -> str:
    """The lines of ``/proc/cpuinfo`` that identify the CPU (the first of each key)."""
    seen: dict[str, str] = {}
    for ln in cpuinfo:
        key = ln.split(":", 1)[0].strip()
        if key in _CPU_KEYS and key not in seen:
            seen[key] = ln.strip()
    return "\n".join(seen[k] for k in sorted(seen))


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return cpu_signature(f)
    except OSError:
        return platform.processor()


def build_key(files: list[Path]) -> str:
    """Hash of everything a library built from ``files`` (sources and headers) depends on."""
    h = hashlib.sha256()
    code = b"".join(p.read_bytes() for p in files)
    for part in (code, torch.__version__.encode(), " ".join(flags()).encode(),
                 platform.machine().encode(), _cpu_signature().encode()):
        h.update(part)
    return h.hexdigest()[:16]


def _read_only(path: Path, exc: OSError) -> UserError:
    return UserError(f"{path}: the kernel cache is read-only ({exc.strerror}) — set "
                     "NPU_DATA_CACHE to a writable folder of your own")


def _own_folder(path: Path, level: str, follow: bool = False) -> None:
    """Make ``path`` (mode 0700) or check the folder that is there, never changing it: this
    user's, and where group or others can write it,
    sticky (as ``/tmp``: they cannot rename or remove what this user makes in it), except the
    library's own folder (``level`` ``"key"``), which only this user may write. Anything else
    is a ``UserError``: nothing in it is loaded. ``follow``: it may be a symlink (the cache
    root a user pointed elsewhere); the folders below it may not."""
    try:
        os.mkdir(path, 0o700)
        return  # made here: 0700 (a umask only takes bits away)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _read_only(path, exc) from None
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path}: the kernel cache is not a folder — remove it or set "
                        "NPU_DATA_CACHE to a folder of your own")
    if st.st_uid != os.getuid():
        raise UserError(f"{path}: the kernel cache belongs to another user (uid {st.st_uid}) "
                        "— refused, nothing in it is loaded; set NPU_DATA_CACHE to a folder "
                        "of your own")
    if st.st_mode & 0o022 and (level == "key" or not st.st_mode & stat.S_ISVTX):
        raise UserError(f"{path}: the kernel cache is writable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}) — refused, nothing in it is loaded and "
                        f"its mode is left as it is; {_OPEN_FIX[level]}")


_OPEN_FIX = {
    "root": "close it (chmod go-w) or set NPU_DATA_CACHE to a folder of your own",
    "folder": "delete it (it is remade) or set NPU_DATA_CACHE to a folder of your own",
    "key": "delete it (it is rebuilt) or set NPU_DATA_CACHE to a folder of your own",
}


def cache_folder(folder: str, key: str) -> Path:
    """``cache_root(folder, key)``, every level from the cache root down this user's (made
    0700 where missing). A level that exists is checked, never changed (``_own_folder``):
    the root and ``folder`` may be open to others only when sticky (a shared ``/tmp``), the
    library's own folder ``key`` never."""
    root = cache_root()
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _read_only(root.parent, exc) from None
    _own_folder(root, "root", follow=True)
    _own_folder(root / folder, "folder")
    _own_folder(root / folder / key, "key")
    return root / folder / key


def _check_entries(build: Path, name: str) -> None:
    """What a build writes in ``build`` is absent or of the kind npu-data writes: files
    (``<name>.so``, ``built``, the build's own in ``ninja/``) and the folder ``ninja``. A
    folder, link or FIFO planted in their place is a ``UserError`` naming it (not a build
    error, nor a read that never returns)."""
    ninja = build / "ninja"
    wants = [(build / f"{name}.so", stat.S_ISREG), (build / "built", stat.S_ISREG),
             (ninja, stat.S_ISDIR)]
    try:
        wants += [(ninja / e, stat.S_ISREG) for e in sorted(os.listdir(ninja))]
    except (FileNotFoundError, NotADirectoryError):
        pass  # no build yet, or not a folder: reported below
    except OSError as exc:
        raise _read_only(ninja, exc) from None
    for path, kind in wants:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not kind(mode):
            what = "a folder" if kind is stat.S_ISDIR else "a file"
            raise UserError(f"{path}: the kernel cache holds something npu-data did not write "
                            f"there (not {what}) — refused; delete {build} (it is rebuilt)")


def _digest(path: Path) -> str | None:
    """sha256 of the file ``path`` (None when it cannot be read)."""
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                sha.update(block)
    except OSError:
        return None
    return sha.hexdigest()


def _recorded(marker: Path) -> str | None:
    """The library digest the ``built`` marker records (None: missing or not ours)."""
    try:
        got = orjson.loads(marker.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    sha = got.get("sha256") if isinstance(got, dict) else None
    return sha if isinstance(sha, str) else None


def load_library(name: str, sources: list[Path], headers: list[Path], folder: str,
                 ldflags: list[str] | None = None) -> None:
    """Build (or reuse) and load the library ``name``; it registers its ``torch.ops``.

    The cache folder must be this user's and not writable by others (``cache_folder``). A
    build links in ``<key>/ninja/``; the library is then copied atomically to ``<key>/`` and
    its sha256 recorded (atomically) in ``built``. A cached library is loaded only when its
    digest is the recorded one; a damaged or truncated one is rebuilt. Raises ``UserError``
    for a cache that is refused or read-only, other errors when it cannot be built (no
    compiler, missing headers or libraries)."""
    load = compat.cpp_extension().load

    build = cache_folder(folder, build_key(sources + headers))
    _check_entries(build, name)
    lib, done, ninja = build / f"{name}.so", build / "built", build / "ninja"
    want = _recorded(done)
    if want is not None and _digest(lib) == want:  # a finished build: load it as it was built
        torch.ops.load_library(str(lib))
        return
    if not os.access(build, os.W_OK):
        raise _read_only(build, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    if want is not None or lib.exists():
        log.warning("npu-data: %s does not match its recorded digest (damaged or truncated): "
                    "rebuilding it", lib)
        for stale in (done, lib, ninja / f"{name}.so"):
            stale.unlink(missing_ok=True)
    ninja.mkdir(mode=0o700, exist_ok=True)
    _say(f"npu-data: compiling the CPU kernels ({name}) — once per machine and version, about "
         f"1-2 minutes; cached in {build}")
    # builds, or waits for another process building into the same folder (a lock)
    try:
        load(name=name, sources=[str(p) for p in sources], extra_cflags=flags(),
             extra_ldflags=ldflags or [],
             extra_include_paths=[str(INCLUDE), str(sources[0].parent)],
             build_directory=str(ninja), is_python_module=False, verbose=False)
    except Exception as exc:
        cxx = shutil.which(os.environ.get("CXX", "c++"))
        if cxx is None:
            raise  # no compiler: the library's own fix says what to install
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise BuildFailed(f"the build in {ninja} failed with the compiler {cxx} present: "
                          f"{first} — delete {build} (it is rebuilt)") from exc
    data = (ninja / f"{name}.so").read_bytes()
    atomic_write_bytes(lib, data, private=True)
    atomic_write_bytes(done, orjson.dumps({"library": lib.name,
                                           "sha256": hashlib.sha256(data).hexdigest(),
                                           "size": len(data)}), private=True)


def _say(line: str) -> None:
    """One line on stderr, unless progress output is off (``NPU_DATA_QUIET=1``, the rule of
    ``npu_data.progress``, which sits above this module)."""
    if os.environ.get("NPU_DATA_QUIET", "") in ("", "0"):
        print(line, file=sys.stderr, flush=True)


class BuildFailed(RuntimeError):
    """A build that failed with a C++ compiler present (its message names the build folder:
    not a missing compiler)."""


_LIBRARIES: list[Library] = []
_THREADS = 0  # set_threads's (0: torch's intra-op count)


def set_threads(n: int) -> None:
    """The threads the compiled kernels spread a batch's samples over, in this process and in
    every library loaded now or later (0: torch's intra-op count). A forked DataLoader worker
    sets this and leaves torch's own at 1 (``loaders.loader_args``): torch's OpenMP team there
    is the parent's without its threads, and a parallel torch op in it can hang."""
    global _THREADS
    _THREADS = max(0, int(n))
    for lib in _LIBRARIES:
        _apply_threads(lib._ops)


def _apply_threads(ops: Any | None) -> None:
    """Hand the thread setting to a loaded library that spreads batches (``parallel.h``)."""
    if ops is not None and hasattr(ops, "set_threads"):
        ops.set_threads(_THREADS)


class Library:
    """One C++ library loaded at most once per process: :meth:`get` returns ``torch.ops.<ns>``
    or ``None`` (``NPU_DATA_NATIVE=0``, or it could not be built or its cache was refused: a
    warning, once, says ``missing`` — what is unavailable — the reason, ``instead`` — what
    happens instead — and, when it could not be built, ``fix``)."""

    def __init__(self, name: str, namespace: str, sources: list[Path], headers: list[Path],
                 folder: str, missing: str, instead: str, fix: str = "",
                 ldflags: list[str] | None = None) -> None:
        self.name, self.namespace, self.folder = name, namespace, folder
        self.sources, self.headers, self.ldflags = sources, headers, ldflags
        self.missing, self.instead, self.fix = missing, instead, fix
        self._lock = threading.Lock()
        self._done = False
        self._ops: Any | None = None
        _LIBRARIES.append(self)

    def get(self) -> Any | None:
        if self._done:
            return self._ops
        with self._lock:
            if not self._done:
                if os.environ.get("NPU_DATA_NATIVE", "1") != "0":
                    try:
                        load_library(self.name, self.sources, self.headers, self.folder,
                                     self.ldflags)
                        self._ops = getattr(torch.ops, self.namespace)
                        _apply_threads(self._ops)
                    except (UserError, BuildFailed) as exc:  # the cache, or a failed build
                        log.warning("npu-data: %s (%s); %s", self.missing, exc, self.instead)
                    except Exception as exc:  # no compiler, headers or library
                        log.warning("npu-data: %s (%s); %s %s", self.missing,
                                    str(exc).splitlines()[0][:200], self.instead, self.fix)
                self._done = True
        return self._ops
