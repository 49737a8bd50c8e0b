"""Progress of long work on stderr, switched off by ``NPU_DATA_QUIET=1``.

On a terminal: a tqdm bar, redrawn in place. Anywhere else (a job log, CI, a file), where
carriage returns would pile up: one plain line every ``INTERVAL`` seconds or tenth of the
work, whichever comes first, and a final line (``LineBar``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")
INTERVAL = 30.0  # seconds between two lines off a terminal
STEP = 0.1  # ... or this fraction of the total, whichever comes first


def quiet() -> bool:
    """True when progress output is disabled (``NPU_DATA_QUIET=1``)."""
    return os.environ.get("NPU_DATA_QUIET", "") not in ("", "0")


def _on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


class LineBar:
    """Progress as plain lines, for output that is not a terminal (``.update(n)``,
    ``.set_postfix_str(s)``, ``.close()``, ``.n``, like a tqdm bar)."""

    def __init__(self, total: int | None, desc: str = "", unit: str = "it",
                 file: IO[str] | None = None, clock: Callable[[], float] = time.monotonic,
                 interval: float = INTERVAL) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self.postfix = ""
        self._file, self._clock, self._interval = file, clock, interval
        self._start = self._last = clock()
        self._next = self._step()  # the count at which the next tenth is reached
        self._closed = False

    def _step(self) -> float:
        if not self.total:
            return float("inf")
        tenth = max(1.0, self.total * STEP)
        return (self.n // tenth + 1) * tenth

    def update(self, n: float = 1) -> None:
        """Count ``n`` more; a line when ``INTERVAL`` has passed or a tenth is done."""
        self.n += int(n)
        if self.total is not None and self.n >= self.total:
            return  # all done: the final line says so
        now = self._clock()
        if now - self._last >= self._interval or self.n >= self._next:
            self._line(now)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Text shown after the counts (a status)."""
        self.postfix = s

    def _line(self, now: float, final: bool = False) -> None:
        self._last, self._next = now, self._step()
        took = now - self._start
        if final and (self.total is None or self.n >= self.total):
            return self._write(f"{self._counts()} done in {took:.1f} s")
        self._write(f"{self._counts()}, {took:.0f} s" + (", stopped" if final else ""))

    def _counts(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        post = f" [{self.postfix}]" if self.postfix else ""
        return f"{self.desc}: {self.n}{of} {self.unit}{pct}{post}"

    def _write(self, text: str) -> None:
        out = self._file or sys.stderr
        print(text, file=out, flush=True)

    def close(self) -> None:
        """The final line (once)."""
        if not self._closed:
            self._closed = True
            self._line(self._clock(), final=True)

    def __enter__(self) -> LineBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(total: int | None, desc: str = "", unit: str = "it") -> tqdm | LineBar:
    """A manually updated progress bar (``.update(n)``, ``.close()``): tqdm on a terminal,
    plain lines elsewhere, nothing with ``NPU_DATA_QUIET=1``."""
    if quiet() or _on_terminal():
        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet(),
                    dynamic_ncols=True, leave=False)
    return LineBar(total, desc, unit)


def progress(
    iterable: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it"
) -> Iterator[T]:
    """Iterate ``iterable`` with progress on stderr (as ``bar``)."""
    if quiet() or _on_terminal():
        return iter(tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                         disable=quiet(), dynamic_ncols=True, leave=False))
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    return _counted(iterable, LineBar(total, desc, unit))


def _counted(iterable: Iterable[T], lines: LineBar) -> Iterator[T]:
    try:
        for item in iterable:
            yield item
            lines.update(1)
    finally:
        lines.close()


@contextlib.contextmanager
def foreign_bars_off() -> Iterator[None]:
    """Within the block, off a terminal or with ``NPU_DATA_QUIET=1``: no progress bars of
    transformers, diffusers or huggingface_hub (their ``\\r``-redrawn lines would pile up in a
    log); on a terminal they are left as they are. Restored after the block."""
    import importlib

    if _on_terminal() and not quiet():
        yield
        return
    undo = []
    for module, off, on, is_on in (
            ("transformers.utils.logging", "disable_progress_bar", "enable_progress_bar",
             "is_progress_bar_enabled"),
            ("diffusers.utils.logging", "disable_progress_bar", "enable_progress_bar",
             "is_progress_bar_enabled"),
            ("huggingface_hub.utils", "disable_progress_bars", "enable_progress_bars",
             "are_progress_bars_disabled")):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        state = getattr(mod, is_on)()
        enabled = not state if is_on.startswith("are_") else state
        if enabled:
            getattr(mod, off)()
            undo.append(getattr(mod, on))
    try:
        yield
    finally:
        for restore in undo:
            restore()
