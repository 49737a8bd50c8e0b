"""Compiled CPU kernels (Pillow-exact resize, colour and augmentation ops), built on first use.

The C++ sources next to this file (``ops.cpp`` registers ``resample.cpp``, ``color.cpp``,
``layout.cpp``, ``augment.cpp`` and ``mixing.cpp``) are compiled once per machine (``common.compiled``) and
registered as ``torch.ops.npu_data.*``. When no compiler is available, the kernel cache is
refused (not this user's, writable by others) or read-only, or ``NPU_DATA_NATIVE=0``,
:func:`ops` returns ``None`` and the transforms use their pure-torch kernels (the same values,
slower on the CPU). JPEG decoding and re-encoding is a library of its own (``npu_data.codecs``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from npu_data.common.compiled import INCLUDE, Library

_HERE = Path(__file__).parent
_LIBRARY = Library(
    "npu_data_native", "npu_data",
    [_HERE / n for n in ("ops.cpp", "resample.cpp", "color.cpp", "layout.cpp", "augment.cpp",
                         "mixing.cpp")],
    [_HERE / "kernels.h", INCLUDE / "parallel.h"], "native",
    "compiled CPU kernels unavailable",
    "using the pure-torch kernels (same values, slower).",
    "Install a C++ compiler to enable them.")


_LOADED: Any | None = None  # the ops once loaded (checked on load by ``common.compiled``)


def ops() -> Any | None:
    """``torch.ops.npu_data`` with the compiled kernels, or ``None`` when unavailable."""
    global _LOADED
    if _LOADED is None:
        _LOADED = _LIBRARY.get()
    return _LOADED


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
