"""COCO run-length masks (``{"size": [h, w], "counts": ...}``) decoded, as pycocotools reads
them (``maskApi.c``): runs over the pixels in column-major order, alternately 0 and 1, the
first run of zeros (possibly empty). ``counts`` is a list of run lengths (uncompressed, as
``iscrowd`` annotations of the COCO files hold them) or a string (compressed,
``rleToString``: each run in 5-bit groups, least significant first, as characters ``48 + g``
with bit ``0x20`` set while more groups follow; the sign taken from bit ``0x10`` of the last
group; from the third run on, the difference to the run two before).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CocoRLEError(ValueError):
    """A COCO RLE that is not well formed (the message says what)."""


def counts_from_string(s: str) -> list[int]:
    """The run lengths of a compressed ``counts`` string (``rleFrString``)."""
    raw = s.encode("ascii", "replace")
    counts: list[int] = []
    p, end = 0, len(raw)
    while p < end:
        x, k, more = 0, 0, True
        while more:
            if p >= end:
                raise CocoRLEError("the counts string ends inside a run length")
            c = raw[p] - 48
            if not 0 <= c < 64:
                raise CocoRLEError(f"character {chr(raw[p])!r} at {p} is not one of a "
                                   "compressed counts string ('0'..'o')")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def counts_to_string(counts: list[int]) -> str:
    """The compressed string of run lengths ``counts`` (``rleToString``; the inverse of
    ``counts_from_string``)."""
    out = bytearray()
    for i, c in enumerate(counts):
        x = c - counts[i - 2] if i > 2 else c
        more = True
        while more:
            g = x & 0x1F
            x >>= 5
            more = not ((x == 0 and not g & 0x10) or (x == -1 and g & 0x10))
            out.append(48 + (g | (0x20 if more else 0)))
    return out.decode("ascii")


def rle_mask(seg: dict[str, Any], height: int, width: int) -> np.ndarray:
    """The (height, width) bool mask of COCO RLE ``seg``; ``CocoRLEError`` if its size is not
    ``height`` x ``width``, its counts are not non-negative integers or do not add up to the
    pixels."""
    size = seg.get("size")
    if not (isinstance(size, list) and len(size) == 2 and all(
            type(v) is int for v in size)):
        raise CocoRLEError(f"size {str(size)[:40]} is not [height, width]")
    if size != [height, width]:
        raise CocoRLEError(f"size {size} is not the image's [height, width] = "
                           f"[{height}, {width}]")
    counts = seg.get("counts")
    if isinstance(counts, str):
        runs = counts_from_string(counts)
    elif isinstance(counts, list) and all(type(v) is int for v in counts):
        runs = counts
    else:
        raise CocoRLEError("counts is neither a list of integers nor a compressed string")
    n = np.asarray(runs, np.int64)
    if n.size and n.min() < 0:
        raise CocoRLEError(f"run {int(np.argmin(n))} has a negative length {int(n.min())}")
    total = int(n.sum())
    if total != height * width:
        raise CocoRLEError(f"the runs cover {total} pixels, the {height}x{width} image has "
                           f"{height * width}")
    bits = np.repeat(np.arange(n.size) % 2 == 1, n)
    return bits.reshape(width, height).T
