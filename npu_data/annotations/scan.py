"""Split a top-level JSON array into byte ranges of whole elements without parsing them.

A numpy-vectorised scanner walks the file in blocks: it finds quotes (dropping those escaped by
an odd run of backslashes), tells which brackets and commas lie outside strings, tracks the
bracket depth, and reports the commas at depth 1 (between tasks). State (inside a string,
depth, a trailing run of backslashes) carries from one block to the next.
"""

from __future__ import annotations

from collections.abc import Iterator

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
    while pos < n:
        block = buf[pos : pos + BLOCK]
        hit = np.flatnonzero(~_WS[block])
        if hit.size:
            return pos + int(hit[0])
        pos += BLOCK
    return n


def array_start(buf: np.ndarray, name: str) -> int:
    """Offset of the opening ``[`` of the top-level array (UserError otherwise)."""
    start = 3 if bytes(buf[:3]) == b"\xef\xbb\xbf" else 0
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
    buf: np.ndarray, name: str, target: int
) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(start, end, last)``: byte ranges of whole top-level elements, about ``target``
    bytes each, separated by depth-1 commas; ``last`` marks the final range (which ends at the
    closing ``]``, or at the end of a truncated file)."""
    n = len(buf)
    top = array_start(buf, name)
    depth = 0
    in_str = False
    bs_carry = 0
    chunk_start = top + 1
    pos = top
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
