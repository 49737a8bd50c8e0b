"""Donated images: a batch image its owner no longer needs, which kernels may overwrite with
their result instead of allocating a new batch (no per-batch allocation, no page faults on
fresh memory, one memory pass less for a flip).

The loader donates the batches it collated itself; ``Compose`` donates what one stage
allocated to the stages after it (never the caller's input unless the caller donated it).
A kernel that can work in place asks :func:`donated`; one that cannot simply allocates, so
donation changes where results are written, never their values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import torch

from npu_data.common.compat import is_compiling

_DONATED: ContextVar[torch.Tensor | None] = ContextVar("npu_data_donated", default=None)


@contextlib.contextmanager
def donating(image: torch.Tensor | None) -> Iterator[None]:
    """Within the block, kernels may write their results into ``image`` (None: nothing)."""
    token = _DONATED.set(image)
    try:
        yield
    finally:
        _DONATED.reset(token)


def donated(image: torch.Tensor) -> bool:
    """Whether ``image`` itself was donated (and is contiguous, as in-place kernels need);
    never in a ``torch.compile`` trace (graphs allocate as they like)."""
    if is_compiling():
        return False
    return _DONATED.get() is image and image.is_contiguous()


def fresh(result: torch.Tensor | None, source: torch.Tensor | None) -> bool:
    """Whether ``result`` lives in memory of its own, not in ``source``'s (a stage's output
    that no caller can hold yet)."""
    if is_compiling():
        return False
    if result is None or source is None or result is source:
        return False
    return result.untyped_storage().data_ptr() != source.untyped_storage().data_ptr()
