"""Ragged columns: values of variable-length runs indexed by int64 offsets (``offsets[i]`` ..
``offsets[i + 1]`` are run ``i``'s values; ``len(offsets) == runs + 1``).

Every ragged column of the project is such a ``(values, offsets)`` pair: the table's and the
shards' nested and text columns, the rows a kind extracts (``annotations.builders.Rows``).
``offsets_of`` builds offsets from run lengths; ``encode_texts`` makes a text column (UTF-8
bytes, offsets) of strings; ``ranges_index`` / ``take_runs`` / ``concat_runs`` select and join
runs; ``offsets_problem`` says what is wrong with offsets read from a file (not 1-D, a wrong
count, a first value other than 0, a last value other than the values' count, a decrease)
before anything slices with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def offsets_of(lengths: np.ndarray | Sequence[int]) -> np.ndarray:
    """int64 offsets ``[0, l0, l0 + l1, ...]`` of runs of ``lengths``."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def encode_texts(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A text column of ``strings``: their UTF-8 bytes (uint8, lone surrogates kept as the
    parser read them) and int64 offsets (one run per string)."""
    joined = "".join(strings)
    if joined.isascii():  # one byte per character: encode all at once
        return (np.frombuffer(joined.encode("ascii"), dtype=np.uint8),
                offsets_of(np.fromiter(map(len, strings), np.int64, count=len(strings))))
    enc = [s.encode("utf-8", "surrogatepass") for s in strings]
    return (np.frombuffer(b"".join(enc), dtype=np.uint8),
            offsets_of(np.fromiter(map(len, enc), np.int64, count=len(enc))))


def ranges_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n), vectorised."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = offsets_of(lengths)[:-1]  # where each run starts in the result
    return np.repeat(starts - begins, lengths) + np.arange(total, dtype=np.int64)


def take_runs(values: np.ndarray, offsets: np.ndarray,
              runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values and offsets of runs ``runs`` (int indices, in that order)."""
    starts = offsets[runs]
    lengths = offsets[runs + 1] - starts
    return values[ranges_index(starts, lengths)], offsets_of(lengths)


def concat_runs(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The runs of every ``(values, offsets)`` part, one after the other (at least one part)."""
    values = np.concatenate([v for v, _ in parts])
    return values, offsets_of(np.concatenate([np.diff(o) for _, o in parts]))


def offsets_problem(offsets: np.ndarray, runs: int, values: int) -> str | None:
    """Why ``offsets`` cannot index ``runs`` runs over ``values`` values (None when they
    can: ``runs + 1`` non-decreasing integers from 0 to ``values``)."""
    off = np.asarray(offsets)
    if off.ndim != 1 or off.dtype.kind not in "iu":
        return f"are not 1-D integers (dtype {off.dtype}, shape {off.shape})"
    if len(off) != runs + 1:
        return f"hold {len(off)} entries, {runs + 1} expected ({runs} runs)"
    if int(off[0]) != 0:
        return f"start at {int(off[0])}, not 0"
    if int(off[-1]) != values:
        return f"end at {int(off[-1])}, the values hold {values}"
    if runs and bool((off[1:] < off[:-1]).any()):
        at = int(np.flatnonzero(off[1:] < off[:-1])[0])
        return f"decrease at run {at} ({int(off[at])} -> {int(off[at + 1])})"
    return None
