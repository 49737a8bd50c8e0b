"""Compiled CPU kernels (Pillow-exact resize and colour ops), built on first use.

The C++ sources next to this file (``ops.cpp`` registers ``resample.cpp``, ``color.cpp`` and
``layout.cpp``) are compiled once per machine with torch's extension
builder into ``common.cache.cache_root('native', <key>)`` (the key covers
the source, torch's version and the CPU), then registered as ``torch.ops.npu_data.*``.
When no compiler is available, or ``NPU_DATA_NATIVE=0``, :func:`ops` returns ``None`` and the
transforms use their pure-torch kernels (the same values, slower on the CPU).
``jpeg.cpp`` (region decoding with libjpeg-turbo, ``torch.ops.npu_data_jpeg``) is a second
library, linked with ``-ljpeg``: :func:`jpeg_ops` returns ``None`` where libjpeg's headers or
library are missing, and the readers decode whole images with Pillow instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from pathlib import Path
from typing import Any

import torch

from npu_data.common.cache import cache_root

_HERE = Path(__file__).parent
_SOURCES = [_HERE / n for n in ("ops.cpp", "resample.cpp", "color.cpp", "layout.cpp")]
_HEADERS = [_HERE / n for n in ("kernels.h", "parallel.h")]
_FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
          "-fopenmp-simd"]
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
log = logging.getLogger(__name__)


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        return platform.processor()


_JPEG_SOURCES = [_HERE / "jpeg.cpp"]
_JPEG_LIBS = ["-ljpeg"]


def build_key(sources: list[Path] | None = None) -> str:
    """Hash of everything a compiled library depends on (default: the kernels)."""
    h = hashlib.sha256()
    code = b"".join(p.read_bytes() for p in (sources or _SOURCES) + _HEADERS)
    for part in (code, torch.__version__.encode(), " ".join(_FLAGS).encode(),
                 platform.machine().encode(), _cpu_signature().encode()):
        h.update(part)
    return h.hexdigest()[:16]


def _build_dir(name: str = "native", sources: list[Path] | None = None) -> Path:
    return cache_root(name, build_key(sources))


def _load(name: str = "npu_data_native", sources: list[Path] | None = None,
          ldflags: list[str] | None = None, folder: str = "native") -> Any:
    from torch.utils.cpp_extension import load

    sources = sources or _SOURCES
    build = _build_dir(folder, sources)
    build.mkdir(parents=True, exist_ok=True)
    lib, done = build / f"{name}.so", build / "built"
    if done.exists() and lib.exists():  # a finished build: load it without asking ninja
        torch.ops.load_library(str(lib))
    else:  # builds, or waits for another process building into the same folder (a lock)
        load(name=name, sources=[str(p) for p in sources], extra_cflags=_FLAGS,
             extra_ldflags=ldflags or [], extra_include_paths=[str(_HERE)],
             build_directory=str(build), is_python_module=False, verbose=False)
        from npu_data.common.atomic import atomic_write_bytes

        atomic_write_bytes(done, b"ok\n")
    return torch.ops.npu_data


def ops() -> Any | None:
    """``torch.ops.npu_data`` with the compiled kernels, or ``None`` when unavailable."""
    if "ops" in _STATE:
        return _STATE["ops"]
    with _LOCK:
        if "ops" not in _STATE:
            result = None
            if os.environ.get("NPU_DATA_NATIVE", "1") != "0":
                try:
                    result = _load()
                except Exception as exc:  # no compiler, no headers, read-only cache, ...
                    log.warning("npu-data: compiled CPU kernels unavailable (%s); using the "
                                "pure-torch kernels (same values, slower). Install a C++ "
                                "compiler to enable them.", str(exc).splitlines()[0][:200])
            _STATE["ops"] = result
    return _STATE["ops"]


def jpeg_ops() -> Any | None:
    """``torch.ops.npu_data_jpeg`` (region decoding), or ``None`` when it cannot be built."""
    if "jpeg" in _STATE:
        return _STATE["jpeg"]
    with _LOCK:
        if "jpeg" not in _STATE:
            result = None
            if os.environ.get("NPU_DATA_NATIVE", "1") != "0":
                try:
                    _load("npu_data_jpeg", _JPEG_SOURCES, _JPEG_LIBS, folder="jpeg")
                    result = torch.ops.npu_data_jpeg
                except Exception as exc:  # no libjpeg headers or library, no compiler, ...
                    log.warning("npu-data: JPEG region decoding unavailable (%s); JPEGs are "
                                "decoded whole with Pillow (same pixels, slower). Install "
                                "libjpeg-turbo's development files (e.g. libjpeg62-turbo-dev) "
                                "to enable it.", str(exc).splitlines()[0][:200])
            _STATE["jpeg"] = result
    return _STATE["jpeg"]


def available() -> bool:
    """Whether the compiled CPU kernels load on this machine."""
    return ops() is not None


_DISABLED = threading.local()


def for_tensor(t: torch.Tensor) -> Any | None:
    """The compiled ops when ``t`` lives on the CPU and they are enabled, else ``None``."""
    if t.device.type != "cpu" or getattr(_DISABLED, "on", False):
        return None
    return ops()


class disabled:
    """Context manager: use the pure-torch kernels on the CPU too (parity checks them)."""

    def __enter__(self) -> disabled:
        self._before = getattr(_DISABLED, "on", False)
        _DISABLED.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        _DISABLED.on = self._before
