"""Progress bars for long work (tqdm on stderr), switched off by ``NPU_DATA_QUIET=1``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def quiet() -> bool:
    """True when progress output is disabled (``NPU_DATA_QUIET=1``)."""
    return os.environ.get("NPU_DATA_QUIET", "") not in ("", "0")


def progress(
    iterable: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it"
) -> Iterator[T]:
    """Wrap ``iterable`` in a progress bar written to stderr."""
    return iter(
        tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet(),
             dynamic_ncols=True, leave=False)
    )


def bar(total: int | None, desc: str = "", unit: str = "it") -> tqdm:
    """A manually updated progress bar (``.update(n)``, ``.close()``)."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet(),
                dynamic_ncols=True, leave=False)
