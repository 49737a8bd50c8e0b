"""What differs between the torch releases npu-data supports, 2.1 through the newest: each
newer API is detected here once, with the older release's way beside it. Nothing else in
npu-data tests ``torch.__version__`` or ``hasattr(torch, ...)``.

Ascend's torch_npu pairs with exactly one torch release (torch_npu 2.1.0 needs torch 2.1.0),
so npu-data never asks for a newer torch than the one installed.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from npu_data.errors import UserError

OLDEST = (2, 1)


def release(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``"2.1.0.post12"`` or ``"2.7.1+cpu"``."""
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


TORCH = release(torch.__version__)

# torch.compiler.is_compiling (2.3+); torch._dynamo.is_compiling before, traced the same way
# (imported on first use: importing torch._dynamo loads optional packages such as transformers)
def _dynamo_is_compiling() -> bool:  # torch < 2.3
    from torch import _dynamo

    return bool(_dynamo.is_compiling())


# torch's own function where it has one (torch >= 2.3): callers bind it at import and call
# torch directly, not through this module
is_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling",
                                           _dynamo_is_compiling)
"""Whether the caller runs inside a ``torch.compile`` trace (False when eager)."""


def autocast_available(device_type: str) -> bool:
    """Whether ``torch.autocast(device_type)`` works here (``torch.amp.is_autocast_available``
    from torch 2.4; before it, whether constructing one is refused)."""
    probe = getattr(torch.amp, "is_autocast_available", None)
    try:
        if probe is not None:
            return bool(probe(device_type))
        torch.autocast(device_type=device_type, enabled=False)
    except (RuntimeError, ValueError):  # a device type torch does not know
        return False
    return True


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` here (``torch.is_autocast_enabled(type)``
    from torch 2.4; before it, one function per device type)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))  # type: ignore[call-arg]
    except TypeError:  # torch < 2.4: no argument
        per_type = {"cpu": "is_autocast_cpu_enabled", "xpu": "is_autocast_xpu_enabled"}
        fn = getattr(torch, per_type.get(device_type, "is_autocast_enabled"))
        return bool(fn())


def _keyword_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.name != "self"}


# torch.utils.data.DataLoader's arguments in this release, with their defaults:
# ``in_order`` came in 2.6, ``pin_memory_device`` in 1.12.
DATALOADER_ARGS = _keyword_defaults(torch.utils.data.DataLoader.__init__)
# what later releases added, with the value that means "as before"
_NEWER_DATALOADER_ARGS = {"in_order": True, "pin_memory_device": ""}


def dataloader_kwargs(**kwargs: Any) -> dict[str, Any]:
    """``kwargs`` for torch's DataLoader, less the arguments this torch does not have: left
    out when they hold the value that means what older torch does, refused (one line naming
    the torch release that has them) otherwise."""
    out = {}
    for name, value in kwargs.items():
        if name in DATALOADER_ARGS:
            out[name] = value
        elif name in _NEWER_DATALOADER_ARGS and value == _NEWER_DATALOADER_ARGS[name]:
            continue
        else:
            raise UserError(f"DataLoader: {name}={value!r} needs a newer torch than the "
                            f"installed {torch.__version__}; leave {name} out")
    return out


# torch's owner count of a storage (``fn(storage._cdata)``), None where this torch build lacks
# it; callers on a batch's path bind it at import
STORAGE_USE_COUNT: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def storage_use_count(storage: torch.UntypedStorage) -> int | None:
    """How many owners ``storage`` has (its Python object included), or None where this torch
    build cannot tell (the aarch64 torch 2.7 CPU wheel lacks ``_storage_Use_Count``)."""
    if STORAGE_USE_COUNT is None:
        return None
    return int(STORAGE_USE_COUNT(storage._cdata))


def has_storage_use_count() -> bool:
    """Whether :func:`storage_use_count` can tell (buffer reuse depends on it)."""
    return STORAGE_USE_COUNT is not None


def cpp_extension() -> types.ModuleType:
    """``torch.utils.cpp_extension``. Before torch 2.4 it does ``from pkg_resources import
    packaging``, and setuptools 81 removed ``pkg_resources``: there, a stand-in holding the
    ``packaging`` that setuptools vendors is importable while torch's module loads, and only then."""
    return import_without_pkg_resources("torch.utils.cpp_extension")


def import_without_pkg_resources(name: str) -> types.ModuleType:
    """Import ``name``, lending it ``pkg_resources.packaging`` if it needs that and it is gone."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != "pkg_resources":
            raise
    try:
        import packaging.version as version
    except ModuleNotFoundError:
        from setuptools._vendor.packaging import version  # type: ignore[no-redef]
    stand_in = types.ModuleType("pkg_resources")
    stand_in.packaging = types.SimpleNamespace(version=version)  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = stand_in
    try:
        return importlib.import_module(name)
    finally:
        del sys.modules["pkg_resources"]
