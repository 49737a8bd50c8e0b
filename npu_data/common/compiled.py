"""Building npu-data's C++ libraries on first use (torch's extension builder), once per
machine, into ``cache_root(<folder>, <key>)``; the key covers the sources, the headers, torch's
version, the flags and the CPU. ``include/`` holds the headers the libraries share
(``parallel.h``: a batch's samples spread over torch's thread pool)."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import torch

from npu_data.common.cache import cache_root

INCLUDE = Path(__file__).parent / "include"
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp-simd"]


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        return platform.processor()


def build_key(files: list[Path]) -> str:
    """Hash of everything a library built from ``files`` (sources and headers) depends on."""
    h = hashlib.sha256()
    code = b"".join(p.read_bytes() for p in files)
    for part in (code, torch.__version__.encode(), " ".join(FLAGS).encode(),
                 platform.machine().encode(), _cpu_signature().encode()):
        h.update(part)
    return h.hexdigest()[:16]


def load_library(name: str, sources: list[Path], headers: list[Path], folder: str,
                 ldflags: list[str] | None = None) -> None:
    """Build (or reuse) and load the library ``name``; it registers its ``torch.ops``. Raises
    when it cannot be built (no compiler, missing headers or libraries, read-only cache)."""
    from torch.utils.cpp_extension import load

    build = cache_root(folder, build_key(sources + headers))
    build.mkdir(parents=True, exist_ok=True)
    lib, done = build / f"{name}.so", build / "built"
    if done.exists() and lib.exists():  # a finished build: load it without asking ninja
        torch.ops.load_library(str(lib))
        return
    # builds, or waits for another process building into the same folder (a lock)
    load(name=name, sources=[str(p) for p in sources], extra_cflags=FLAGS,
         extra_ldflags=ldflags or [], extra_include_paths=[str(INCLUDE), str(sources[0].parent)],
         build_directory=str(build), is_python_module=False, verbose=False)
    from npu_data.common.atomic import atomic_write_bytes

    atomic_write_bytes(done, b"ok\n")
