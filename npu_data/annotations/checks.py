"""Checks of result values before extraction: nothing is coerced.

A value that is not what Label Studio writes (a string for a number, NaN, infinity, a label
that is not a list of strings, a point that is not an ``[x, y]`` pair, ...) rejects its task.
Each check first tries a C-level pass over the whole column (``fast``) and, where that pass
finds anything odd, falls to the per-result loop, which gives the reasons; the generic loop
alone (``fast`` off) reports exactly the same, in the same order (key by key, row by row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

MISSING: Any = object()  # a key that is absent (``None`` is a value, and a wrong one)
_BIG = 1.7976931348623157e308  # the largest finite float64
_NUMBERS = {int, float}


def is_number(v: Any) -> bool:
    """Whether ``v`` is an int or float (not a bool) with a finite float64 value."""
    c = v.__class__
    if c is float:
        return bool(v - v == 0.0)  # False for nan and +-inf
    if c is int:
        return bool(-_BIG <= v <= _BIG)
    return False


def show(v: Any) -> str:
    """``v`` for a message (shortened)."""
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _str_list(v: Any) -> bool:
    return v.__class__ is list and all(x.__class__ is str for x in v)


class Check:
    """The checks of one batch's values; ``fail(row, message)`` reports a bad one."""

    MISSING = MISSING  # for the kinds' checks
    show = staticmethod(show)

    def __init__(self, vals: Sequence[dict], res: Sequence[dict], pscore: Sequence[Any],
                 fast: bool, fail: Callable[[int, str], None]) -> None:
        self.vals, self.res, self.pscore, self.fast = vals, res, pscore, fast
        self._fail = fail
        self.bad: set[int] = set()

    def fail(self, i: int, msg: str) -> None:
        self.bad.add(i)
        self._fail(i, msg)

    def column(self, key: str, dicts: Sequence[dict] | None = None) -> list[Any]:
        return list(map(dict.get, self.vals if dicts is None else dicts, repeat(key),
                        repeat(MISSING)))

    # --- numbers ------------------------------------------------------------------------
    def numbers(self, key: str, required: bool = True, nonneg: bool = False) -> None:
        """``value[key]``: a finite number (>= 0 with ``nonneg``); absent only if not
        ``required``."""
        col = self.column(key)
        if self.fast and set(map(type, col)) <= _NUMBERS:
            try:
                arr = np.asarray(col, np.float64)
            except OverflowError:  # an int beyond float64
                pass
            else:
                ok = np.isfinite(arr)
                if nonneg:
                    ok &= arr >= 0
                if ok.all():
                    return
        for i, v in enumerate(col):
            self.number(i, key, v, required, nonneg)

    def required_numbers(self, keys: tuple[str, ...], nonneg: tuple[str, ...] = ()) -> None:
        """``numbers(key, nonneg=key in nonneg)`` for each of ``keys`` (all required), with one
        C-level pass over them all first."""
        if self.fast and self.vals:
            try:
                flat = list(chain.from_iterable(map(itemgetter(*keys), self.vals)))
            except KeyError:
                flat = None
            if flat is not None and set(map(type, flat)) <= _NUMBERS:
                try:
                    arr = np.asarray(flat, np.float64).reshape(len(self.vals), len(keys))
                except OverflowError:
                    pass
                else:
                    cols = [j for j, k in enumerate(keys) if k in nonneg]
                    if np.isfinite(arr).all() and (arr[:, cols] >= 0).all():
                        return
        for key in keys:
            self.numbers(key, nonneg=key in nonneg)

    def number(self, i: int, key: str, v: Any, required: bool, nonneg: bool) -> None:
        if v is MISSING:
            if required:
                self.fail(i, f"field {key!r} is missing")
        elif not is_number(v):
            self.fail(i, f"field {key!r} = {show(v)} is not a finite number")
        elif nonneg and v < 0:
            self.fail(i, f"field {key!r} = {show(v)} is negative")

    # --- strings ------------------------------------------------------------------------
    def labels(self, key: str) -> None:
        """``value[key]`` (else the generic ``labels``, else none): a list of strings."""
        col = self.column(key)
        if self.fast and set(map(type, col)) <= {list} and set(
                map(type, chain.from_iterable(col))) <= {str}:
            return
        for i, v in enumerate(col):
            k = key
            if v is MISSING:
                k, v = "labels", self.vals[i].get("labels", MISSING)
                if v is MISSING:
                    continue
            if not _str_list(v):
                self.fail(i, f"field {k!r} = {show(v)} is not a list of strings")

    def strings(self, key: str, required: bool = True) -> None:
        """``value[key]``: a list of strings."""
        col = self.column(key)
        if self.fast and set(map(type, col)) <= {list} and set(
                map(type, chain.from_iterable(col))) <= {str}:
            return
        for i, v in enumerate(col):
            if v is MISSING:
                if required:
                    self.fail(i, f"field {key!r} is missing")
            elif not _str_list(v):
                self.fail(i, f"field {key!r} = {show(v)} is not a list of strings")

    def paths(self, key: str) -> None:
        """``value[key]``: a list of lists of strings (taxonomy paths)."""
        for i, v in enumerate(self.column(key)):
            if v is MISSING:
                self.fail(i, f"field {key!r} is missing")
            elif v.__class__ is not list or not all(map(_str_list, v)):
                self.fail(i, f"field {key!r} = {show(v)} is not a list of lists of strings")

    def text_of(self, key: str, required: bool = True) -> None:
        """``result[key]`` (relations): a string."""
        for i, v in enumerate(self.column(key, self.res)):
            if v is MISSING:
                if required:
                    self.fail(i, f"field {key!r} is missing")
            elif v.__class__ is not str:
                self.fail(i, f"field {key!r} = {show(v)} is not a string")

    def one_of(self, key: str, allowed: Sequence[Any]) -> None:
        for i, v in enumerate(self.column(key)):
            if v is not MISSING and (v.__class__ is not str or v not in allowed):
                self.fail(i, f"field {key!r} = {show(v)} is not one of {', '.join(allowed)}")

    def flag(self, key: str) -> None:
        """``value[key]``, where present: true or false."""
        for i, v in enumerate(self.column(key)):
            if v is not MISSING and v.__class__ is not bool:
                self.fail(i, f"field {key!r} = {show(v)} is not true or false")

    # --- nested -------------------------------------------------------------------------
    def points(self, key: str = "points") -> None:
        """``value[key]``: a list of ``[x, y]`` pairs of finite numbers."""
        col = self.column(key)
        if self.fast and set(map(type, col)) <= {list}:
            flat = list(chain.from_iterable(col))
            if set(map(type, flat)) <= {list} and set(map(len, flat)) <= {2}:
                xy = list(chain.from_iterable(flat))
                if set(map(type, xy)) <= _NUMBERS:
                    try:
                        if np.isfinite(np.asarray(xy, np.float64)).all():
                            return
                    except OverflowError:
                        pass
        for i, v in enumerate(col):
            if v is MISSING:
                self.fail(i, f"field {key!r} is missing")
            elif v.__class__ is not list:
                self.fail(i, f"field {key!r} = {show(v)} is not a list of [x, y] pairs")
            else:
                for j, p in enumerate(v):
                    if p.__class__ is not list or len(p) != 2 or not all(map(is_number, p)):
                        self.fail(i, f"field '{key}[{j}]' = {show(p)} is not an [x, y] pair "
                                     "of finite numbers")
                        break

    def ints(self, key: str, rows: Sequence[int]) -> None:
        """``value[key]`` of ``rows``: a list of integers."""
        vals = self.vals
        col = [vals[i].get(key, MISSING) for i in rows]
        if self.fast and set(map(type, col)) <= {list} and set(
                map(type, chain.from_iterable(col))) <= {int}:
            return
        for i, v in zip(rows, col, strict=True):
            if v is MISSING:
                self.fail(i, f"field {key!r} is missing")
            elif v.__class__ is not list or not all(x.__class__ is int for x in v):
                self.fail(i, f"field {key!r} = {show(v)} is not a list of integers")

    def score(self) -> None:
        """The result's ``score`` (else its prediction's): none or a finite number."""
        raw = list(map(dict.get, self.res, repeat("score"), self.pscore))
        if self.fast and set(map(type, raw)) <= {float, int, type(None)}:
            try:
                if np.isfinite(np.asarray([x for x in raw if x is not None], np.float64)).all():
                    return
            except OverflowError:  # an int beyond float64
                pass
        for i, v in enumerate(raw):
            if v is not None and not is_number(v):
                self.fail(i, f"field 'score' = {show(v)} is not a finite number")
