"""Ragged columns: values of variable-length runs indexed by int64 offsets (``offsets[i]`` ..
``offsets[i + 1]`` are run ``i``'s values; ``len(offsets) == runs + 1``).

``offsets_of`` builds offsets from run lengths; ``offsets_problem`` says what is wrong with
offsets read from a file (not 1-D, a wrong count, a first value other than 0, a last value
other than the values' count, a decrease) before anything slices with them.
"""

from __future__ import annotations

import numpy as np


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """int64 offsets ``[0, l0, l0 + l1, ...]`` of runs of ``lengths``."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


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
