"""What differs between the torch releases npu-data supports, 2.1 through the newest: each
newer API is detected here once, with the older release's way beside it. Nothing else in
npu-data tests ``torch.__version__`` or ``hasattr(torch, ...)``.

Ascend's torch_npu pairs with exactly one torch release (torch_npu 2.1.0 needs torch 2.1.0),
so npu-data never asks for a newer torch than the one installed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import torch

from npu_data.errors import UserError

OLDEST = (2, 1)


def _version(text: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


TORCH = _version(torch.__version__)

# torch.compiler.is_compiling (2.3+); torch._dynamo.is_compiling before, traced the same way
_IS_COMPILING: Callable[[], bool] = (
    getattr(getattr(torch, "compiler", None), "is_compiling", None)
    or torch._dynamo.is_compiling  # type: ignore[attr-defined]
)


def is_compiling() -> bool:
    """Whether the caller runs inside a ``torch.compile`` trace (False when eager)."""
    return bool(_IS_COMPILING())


def autocast_available(device_type: str) -> bool:
    """Whether ``torch.autocast(device_type)`` works here (``torch.amp.is_autocast_available``
    from torch 2.4; before it, whether constructing one is refused)."""
    probe = getattr(torch.amp, "is_autocast_available", None)
    if probe is not None:
        return bool(probe(device_type))
    try:
        torch.autocast(device_type=device_type, enabled=False)
    except (RuntimeError, ValueError):
        return False
    return True


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


_USE_COUNT: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def storage_use_count(storage: torch.UntypedStorage) -> int | None:
    """How many owners ``storage`` has (its Python object included), or None where this torch
    build cannot tell (the aarch64 torch 2.7 CPU wheel lacks ``_storage_Use_Count``)."""
    if _USE_COUNT is None:
        return None
    return int(_USE_COUNT(storage._cdata))


def has_storage_use_count() -> bool:
    """Whether :func:`storage_use_count` can tell (buffer reuse depends on it)."""
    return _USE_COUNT is not None
