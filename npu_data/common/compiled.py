"""Building npu-data's C++ libraries on first use (torch's extension builder), once per
machine, into ``cache_root(<folder>, <key>)``; the key covers the sources, the headers, torch's
version, the flags and the CPU. ``include/`` holds the headers the libraries share
(``parallel.h``: a batch's samples spread over torch's thread pool)."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from npu_data.common import compat
from npu_data.common.cache import cache_root

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
        from npu_data.errors import UserError

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


def load_library(name: str, sources: list[Path], headers: list[Path], folder: str,
                 ldflags: list[str] | None = None) -> None:
    """Build (or reuse) and load the library ``name``; it registers its ``torch.ops``. Raises
    when it cannot be built (no compiler, missing headers or libraries, read-only cache)."""
    load = compat.cpp_extension().load

    build = cache_root(folder, build_key(sources + headers))
    build.mkdir(parents=True, exist_ok=True)
    lib, done = build / f"{name}.so", build / "built"
    if done.exists() and lib.exists():  # a finished build: load it without asking ninja
        torch.ops.load_library(str(lib))
        return
    # builds, or waits for another process building into the same folder (a lock)
    load(name=name, sources=[str(p) for p in sources], extra_cflags=flags(),
         extra_ldflags=ldflags or [], extra_include_paths=[str(INCLUDE), str(sources[0].parent)],
         build_directory=str(build), is_python_module=False, verbose=False)
    from npu_data.common.atomic import atomic_write_bytes

    atomic_write_bytes(done, b"ok\n")


class Library:
    """One C++ library loaded at most once per process: :meth:`get` returns ``torch.ops.<ns>``
    or ``None`` (``NPU_DATA_NATIVE=0``, or it could not be built: a warning, once, says
    ``missing`` — what is unavailable — the reason, and ``instead`` — what happens instead)."""

    def __init__(self, name: str, namespace: str, sources: list[Path], headers: list[Path],
                 folder: str, missing: str, instead: str,
                 ldflags: list[str] | None = None) -> None:
        self.name, self.namespace, self.folder = name, namespace, folder
        self.sources, self.headers, self.ldflags = sources, headers, ldflags
        self.missing, self.instead = missing, instead
        self._lock = threading.Lock()
        self._done, self._ops = False, None

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
                    except Exception as exc:  # no compiler, headers or library; read-only cache
                        log.warning("npu-data: %s (%s); %s", self.missing,
                                    str(exc).splitlines()[0][:200], self.instead)
                self._done = True
        return self._ops
