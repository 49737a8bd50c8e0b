"""Label Studio brush RLE decoder (the bit-stream format of label-studio-converter's brush.py).

Layout: ``num`` (32 bits, number of decoded bytes), ``word_size - 1`` (5 bits), four run-length
field sizes ``- 1`` (4 bits each), then records: a 1-bit flag, a 2-bit index into the run-length
sizes and a run length ``n - 1``; flag 1 = one word repeated ``n`` times, flag 0 = ``n`` literal
words. Decoded it is a flat H*W*4 RGBA array; the mask is channel 3.

Decoding is vectorised. Where the next record would start if one started at bit ``p`` is
computed with numpy for every bit position at once (a table lookup on the 19 bits at ``p``);
the one serial step left, following that chain from the first record, is a list append per
record; the records' values and run lengths are then read with numpy again.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np


class RLEError(ValueError):
    """The RLE stream is malformed (truncated, or decodes to more values than announced)."""


HEADER_BITS = 53
_BLOCK = 1 << 16  # stream bytes per vectorised pass over the bit positions (bounds temporaries)


@lru_cache(maxsize=8)
def _advance(word: int, sizes: tuple[int, ...]) -> np.ndarray:
    """Length in bits of a record, indexed by its first 19 bits (the flag, the size index and
    the 16 bits after them: a run-length field has at most 16 bits)."""
    head = np.arange(1 << 19, dtype=np.int64)
    size = np.asarray(sizes, np.int64)[(head >> 16) & 3]
    n = ((head & 0xFFFF) >> (16 - size)) + 1
    lut = (3 + size + np.where((head >> 18) == 1, word, word * n)).astype(np.int32)
    lut.flags.writeable = False  # int32 (at most 3 + 16 + 32 * 65536): half the cache of int64
    return lut


def _windows(raw: np.ndarray, dtype: str) -> np.ndarray:
    """For every byte ``i`` of the stream (and one past its end), the bytes from ``i`` on as one
    big-endian ``dtype`` (``>u4`` or ``>u8``; zeros past the end), native byte order."""
    n, k = raw.size, np.dtype(dtype).itemsize
    padded = np.zeros(n + 2 * k, np.uint8)
    padded[:n] = raw
    out = np.empty(n + 1, np.dtype(dtype).newbyteorder("="))
    for s in range(k):
        m = len(range(s, n + 1, k))
        out[s::k] = padded[s:s + k * m].view(dtype)
    return out


def _next_table(raw: np.ndarray, nbits: int, word: int, sizes: tuple[int, ...]) -> np.ndarray:
    """``nxt[p]`` for ``p`` in ``0..nbits``: the bit where the record after one starting at bit
    ``p`` starts; ``> nbits`` exactly where a record starting at ``p`` does not fit."""
    lut = _advance(word, sizes)
    win = _windows(raw, ">u4")
    # int32 unless p + a record's length (< 2**22 bits) could overflow it: half the memory
    index = np.int32 if nbits + (1 << 22) < (1 << 31) else np.int64
    nxt = np.empty(nbits + 1, index)
    shifts = np.arange(8, dtype=np.uint32)
    for b0 in range(0, win.size, _BLOCK):
        head = ((win[b0:b0 + _BLOCK, None] << shifts) >> np.uint32(13)).ravel()  # 19 bits
        p0 = b0 * 8
        p1 = min(p0 + head.size, nbits + 1)
        np.add(np.take(lut, head[:p1 - p0], mode="clip"), np.arange(p0, p1, dtype=index),
               out=nxt[p0:p1])
    return nxt


def _bits_at(win: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width``-bit values (width <= 57) starting at bit offsets ``pos``, as int64."""
    x = win[pos >> 3] << (pos & 7).astype(np.uint64)
    return (x >> np.uint64(64 - width)).astype(np.int64)


def _bytes(rle: Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(rle, list):
        try:
            return np.frombuffer(bytes(rle), np.uint8)  # the usual JSON list: 10x np.asarray
        except (TypeError, ValueError):
            pass  # floats, bools, out-of-range values: the checks below
    data = np.asarray(rle, dtype=np.int64)
    if data.size and (data.min() < 0 or data.max() > 255):
        raise RLEError("RLE values must be bytes (0..255)")
    return data.astype(np.uint8).ravel()


def _segments(rle: Sequence[int] | np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """``(num, values, lengths)``: the decoded stream is ``np.repeat(values, lengths)[:num]``;
    RLEError where the stream is malformed."""
    raw = _bytes(rle)
    nbits = raw.size * 8
    if nbits < HEADER_BITS:
        raise RLEError("RLE stream shorter than its header")
    head = int.from_bytes(raw[:7].tobytes(), "big") << 8
    num = head >> 32
    word = ((head >> 27) & 31) + 1
    sizes = tuple(((head >> (23 - 4 * k)) & 15) + 1 for k in range(4))
    if num == 0:
        return 0, np.zeros(0, np.uint8), np.zeros(0, np.int64)
    nxt = memoryview(_next_table(raw, nbits, word, sizes))  # type: ignore[arg-type]
    chain: list[int] = []
    append = chain.append
    p = HEADER_BITS
    while p <= nbits:  # every record start, then the first one that does not fit
        append(p)
        p = nxt[p]
    win = _windows(raw, ">u8")
    pos = np.array(chain[:-1], np.int64)
    first = _bits_at(win, pos, 19)
    size = np.asarray(sizes, np.int64)[(first >> 16) & 3]
    n = ((first & 0xFFFF) >> (16 - size)) + 1
    done = np.cumsum(n)
    k = int(np.searchsorted(done, num, side="left"))  # the record that reaches num
    if k == pos.size:  # the record after the last that fits is needed
        raise RLEError(f"RLE stream truncated after {int(done[-1]) if k else 0} of {num} values")
    repeat, n = (first[:k + 1] >> 18) == 1, n[:k + 1]
    payload = pos[:k + 1] + 3 + size[:k + 1]
    if repeat.all():  # one repeated word per record (the usual brush mask)
        return num, (_bits_at(win, payload, word) & 0xFF).astype(np.uint8), n
    count = np.where(repeat, 1, n)  # segments per record: a literal word is a segment of 1
    rec = np.repeat(np.arange(count.size), count)
    within = np.arange(rec.size, dtype=np.int64) - (np.cumsum(count) - count)[rec]
    vals = _bits_at(win, payload[rec] + within * word, word) & 0xFF
    return num, vals.astype(np.uint8), np.where(repeat, n, 1)[rec]


def decode_rle(rle: Sequence[int] | np.ndarray) -> np.ndarray:
    """Decode a brush RLE (list of byte values) to the flat uint8 array it encodes."""
    num, vals, lens = _segments(rle)
    # The SDK's decoder fills an array of exactly ``num`` values.
    return np.repeat(vals, lens)[:num]


def rle_to_mask(rle: Sequence[int] | np.ndarray, height: int, width: int) -> np.ndarray:
    """Decode a brush RLE to an (height, width) bool mask (alpha channel >= 128)."""
    num, vals, lens = _segments(rle)
    if num != height * width * 4:
        raise RLEError(
            f"brush RLE decodes to {num} values, expected {height}x{width}x4 = "
            f"{height * width * 4}"
        )
    # Only the alpha bytes (flat index 4j+3) are expanded: a segment covering flat [s, e)
    # holds the alpha bytes of pixels s//4 .. e//4 - 1.
    ends = np.minimum(np.cumsum(lens), num)
    return np.repeat(vals >= 128, np.diff(ends // 4, prepend=0)).reshape(height, width)


# --- encoding (label-studio-converter's ``encode_rle`` / ``mask2rle``) -----------------------
_SIZES = (3, 4, 8, 16)  # the run-length field sizes label-studio-converter writes
_MAX_RUN = 1 << 16  # the longest run one record holds (a 16-bit field of n - 1)


def _runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, length) of every run of equal values of the flat array ``a``."""
    if not a.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    return a[starts].astype(np.int64), np.diff(np.append(starts, a.size))


def encode_rle(flat: np.ndarray) -> list[int]:
    """The brush RLE (byte values) of the flat uint8 array ``flat``, as label-studio-converter
    writes it: 8-bit words, run-length fields of 3, 4, 8 and 16 bits; a single value is a
    literal record of one word, a longer run one repeated word (a run over 65536 values:
    records of 65536 and the rest, each with the 16-bit field), then 1 to 8 zero bits to the
    next byte. ``decode_rle`` gives ``flat`` back."""
    a = np.asarray(flat, np.uint8).ravel()
    return _encode_runs(*_runs(a), a.size)


def mask_to_rle(mask: np.ndarray) -> list[int]:
    """The brush RLE of a (height, width) mask as Label Studio stores it: every pixel's four
    RGBA bytes 255 inside the mask, 0 outside (label-studio-converter's ``mask2rle``; the
    runs are found over the pixels, not over the four times longer bytes)."""
    m = np.asarray(mask).astype(bool).ravel()
    values, lengths = _runs(m)
    return _encode_runs(values * 255, lengths * 4, m.size * 4)


def _encode_runs(values: np.ndarray, lengths: np.ndarray, num: int) -> list[int]:
    """The brush RLE of ``num`` values given as runs (no two neighbours equal)."""
    if num >= 1 << 32:
        raise RLEError(f"{num} values do not fit a brush RLE (at most 2**32 - 1)")
    header = (num << 21) | (7 << 16)
    for k, s in enumerate(_SIZES):
        header |= (s - 1) << (12 - 4 * k)
    pieces = (lengths + _MAX_RUN - 1) // _MAX_RUN  # runs longer than a record: split
    values = np.repeat(values, pieces)
    n = np.full(int(pieces.sum()), _MAX_RUN, np.int64)
    n[np.cumsum(pieces) - 1] = lengths - (pieces - 1) * _MAX_RUN
    split = np.repeat(pieces > 1, pieces)  # every piece of a split run: a 16-bit field
    idx = np.where(split, 3, np.searchsorted(1 << np.asarray(_SIZES, np.int64), n))
    size = np.asarray(_SIZES, np.int64)[idx]
    run = (n > 1) | split
    # a record: flag (1), size index (2), n - 1 (size bits), word (8); literals: 0 00 000 word
    code = np.where(run, (((1 << 2 | idx) << size | (n - 1)) << 8) | values, values)
    bits = np.where(run, 11 + size, 14)
    every = np.unpackbits(code.astype(">u4").view(np.uint8).reshape(-1, 4), axis=1)
    body = every[np.arange(32) >= (32 - bits)[:, None]]
    head = np.unpackbits(np.frombuffer((int(header) << 3).to_bytes(7, "big"), np.uint8))
    pad = np.zeros(8 - (HEADER_BITS + body.size) % 8, np.uint8)  # 1 to 8 bits, as the SDK
    return np.packbits(np.concatenate([head[:HEADER_BITS], body, pad])).tolist()
