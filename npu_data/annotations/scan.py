"""Split a top-level JSON array into byte ranges of whole elements without parsing them.

A numpy-vectorised scanner walks the file in blocks: it finds quotes (dropping those escaped by
an odd run of backslashes), tells which brackets and commas lie outside strings, tracks the
bracket depth, and reports the commas at depth 1 (between tasks). State (inside a string,
depth, a trailing run of backslashes) carries from one block to the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator

import numpy as np

from npu_data.errors import UserError

BLOCK = 4 << 20
_KIND = np.zeros(256, dtype=np.uint8)
_KIND[[ord("["), ord("{")]] = 1
_KIND[[ord("]"), ord("}")]] = 2
_KIND[ord(",")] = 3
_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0A, 0x0D]] = True
NOT_A_LIST = "expected a Label Studio JSON export (a list of tasks)"


def _first_non_ws(buf: np.ndarray, start: int) -> int:
    """Index of the first non-whitespace byte at or after ``start`` (len(buf) if none)."""
    n = len(buf)
    pos = start
    step = 256  # usually a few bytes away: look near first
    while pos < n:
        block = buf[pos : pos + step]
        hit = np.flatnonzero(~_WS[block])
        if hit.size:
            return pos + int(hit[0])
        pos += step
        step = min(step * 16, BLOCK)
    return n


def array_start(buf: np.ndarray, name: str) -> int:
    """Offset of the opening ``[`` of the top-level array (UserError otherwise)."""
    start = 3 if bytes(buf[:3]) == b"\xef\xbb\xbf" else 0  # UTF-8 byte order mark
    if bytes(buf[:2]) in (b"\xff\xfe", b"\xfe\xff"):
        raise UserError(f"{name}: the file is UTF-16 text (Windows PowerShell's Out-File and "
                        "'>' write that) — save it as UTF-8, e.g. Out-File -Encoding utf8, or "
                        "download the export again")
    first = _first_non_ws(buf, start)
    if first >= len(buf):
        raise UserError(f"{name}: the file is empty — {NOT_A_LIST}; export the project again")
    if buf[first] != ord("["):
        found = "an object" if buf[first] == ord("{") else "a single value"
        raise UserError(
            f"{name}: {NOT_A_LIST}, found {found} at byte {first} — export the project as "
            "JSON or JSON_MIN from Label Studio"
        )
    return first


def element_chunks(
    buf: np.ndarray, name: str, target: int, resume: int | None = None
) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(start, end, last)``: byte ranges of whole top-level elements, about ``target``
    bytes each, separated by depth-1 commas; ``last`` marks the final range (which ends at the
    closing ``]``, or at the end of a truncated file). ``resume``: start at this known element
    boundary (just after a depth-1 comma) instead of the opening ``[``."""
    n = len(buf)
    top = array_start(buf, name) if resume is None else -1
    depth = 0 if resume is None else 1
    in_str = False
    bs_carry = 0
    chunk_start = top + 1 if resume is None else resume
    pos = top if resume is None else resume
    while pos < n:
        b = buf[pos : pos + BLOCK]
        quotes = np.flatnonzero(b == 34)
        bsl = np.flatnonzero(b == 92)
        if bs_carry:
            bsl = np.concatenate([np.arange(-bs_carry, 0), bsl])
        bs_carry = 0
        if bsl.size:
            brk = np.flatnonzero(np.diff(bsl) != 1)
            run_end = bsl[np.concatenate([brk, [bsl.size - 1]])]
            run_len = run_end - bsl[np.concatenate([[0], brk + 1])] + 1
            if quotes.size:
                k = np.minimum(np.searchsorted(run_end, quotes - 1), run_end.size - 1)
                escaped = (run_end[k] == quotes - 1) & (run_len[k] % 2 == 1)
                quotes = quotes[~escaped]
            if run_end[-1] == b.size - 1:
                bs_carry = int(run_len[-1])
        struct = np.flatnonzero(_KIND[b])
        outside = (np.searchsorted(quotes, struct) + int(in_str)) % 2 == 0
        in_str ^= bool(quotes.size % 2)
        struct = struct[outside]
        kind = _KIND[b[struct]]
        delta = np.where(kind == 1, 1, np.where(kind == 2, -1, 0)).astype(np.int64)
        after = depth + np.cumsum(delta)
        before = after - delta
        if after.size:
            depth = int(after[-1])
        # The top-level '[' itself is the first structural byte (depth 0 -> 1).
        if pos == top:
            struct, kind, before, after = struct[1:], kind[1:], before[1:], after[1:]
        bad = np.flatnonzero((before <= 0) | (after < 0))
        ends = np.flatnonzero((kind == 2) & (after == 0))
        if bad.size and (not ends.size or bad[0] <= ends[0]):
            if not (ends.size and bad[0] == ends[0]):
                at = pos + int(struct[bad[0]])
                raise UserError(f"{name}: malformed JSON at byte {at}: unbalanced brackets or "
                                "data after the top-level list — re-export the project")
        limit = int(ends[0]) if ends.size else struct.size
        seps = pos + struct[: limit][(kind[:limit] == 3) & (before[:limit] == 1)]
        for sep in seps.tolist():
            if sep - chunk_start >= target:
                yield chunk_start, sep, False
                chunk_start = sep + 1
        if ends.size:
            close = pos + int(struct[ends[0]])
            trail = _first_non_ws(buf, close + 1)
            if trail < n:
                raise UserError(f"{name}: malformed JSON at byte {trail}: data after the "
                                "top-level list — re-export the project")
            yield chunk_start, close, True
            return
        pos += b.size
    yield chunk_start, n, True


_WSP = rb"[ \t\n\r]*"
_SCALAR = rb'(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)'
_KEY = rb'"([^"\\]*)"' + _WSP + b":" + _WSP
_HEAD = re.compile(rb"\{" + _WSP + _KEY + _SCALAR + _WSP + b"," + _WSP + _KEY)
_HEAD1 = re.compile(rb"\{" + _WSP + _KEY + rb"([\[{])")  # first value a list or an object
MAX_MISSES = 3


def separator_pattern(buf: memoryview, first: int) -> re.Pattern[bytes] | None:
    """A regex for a comma followed by an element that opens like the one at ``first`` (same
    first two keys after a scalar value, or same first key and bracket), or None when it opens
    otherwise."""
    head = buf[first : first + 4096]
    m = _HEAD.match(head)
    if m is not None:
        k1, k2 = (re.escape(k) for k in m.groups())
        return re.compile(b"," + _WSP + rb"\{" + _WSP + b'"' + k1 + b'"' + _WSP + b":" + _WSP
                          + _SCALAR + _WSP + b"," + _WSP + b'"' + k2 + b'"' + _WSP + b":")
    m = _HEAD1.match(head)
    if m is not None:
        k1, bracket = (re.escape(k) for k in m.groups())
        return re.compile(b"," + _WSP + rb"\{" + _WSP + b'"' + k1 + b'"' + _WSP + b":" + _WSP
                          + bracket)
    return None


def fast_chunks(
    buf: np.ndarray, name: str, target: int, try_load: Callable[[int, int], list | None]
) -> Generator[tuple[int, int, bool, list | None], None, None]:
    """``element_chunks`` plus the loaded elements, skipping the byte scan where it can.

    After ``target`` bytes, the next comma that looks like a separator (``separator_pattern``
    of the first element) ends the chunk if ``try_load(start, end)`` parses it: a strict JSON
    parser accepts ``[`` + bytes + ``]`` from a known boundary only when ``end`` lies outside
    strings at depth 1, so a wrong guess is never accepted. Otherwise that chunk comes from the
    exact scan (and ``None`` stands for its elements); after ``MAX_MISSES`` misses in a row the
    rest does.
    """
    top = array_start(buf, name)
    first = _first_non_ws(buf, top + 1)
    view = memoryview(buf).cast("B")  # type: ignore[arg-type]
    pattern = separator_pattern(view, first) if first < len(buf) else None
    start, misses = top + 1, 0
    while pattern is not None and misses < MAX_MISSES:
        m = pattern.search(view, start + target, min(len(buf), start + 4 * target))
        tasks = try_load(start, m.start()) if m is not None else None
        if m is not None and tasks:
            misses = 0
            yield start, m.start(), False, tasks
            del tasks  # the caller holds them as long as it needs
            start = m.start() + 1
            continue
        misses += 1
        s, e, last = next(element_chunks(buf, name, target, resume=start))
        yield s, e, last, None
        if last:
            return
        start = e + 1
    for s, e, last in element_chunks(buf, name, target, resume=start if pattern else None):
        yield s, e, last, None
