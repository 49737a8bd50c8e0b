"""Label Studio brush RLE decoder (the bit-stream format of label-studio-converter's brush.py).

Layout: ``num`` (32 bits, number of decoded bytes), ``word_size - 1`` (5 bits), four run-length
field sizes ``- 1`` (4 bits each), then records: a 1-bit flag, a 2-bit index into the run-length
sizes and a run length ``n - 1``; flag 1 = one word repeated ``n`` times, flag 0 = ``n`` literal
words. Decoded it is a flat H*W*4 RGBA array; the mask is channel 3.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class RLEError(ValueError):
    """The RLE stream is malformed (truncated, or decodes to more values than announced)."""


def decode_rle(rle: Sequence[int] | np.ndarray) -> np.ndarray:
    """Decode a brush RLE (list of byte values) to the flat uint8 array it encodes."""
    data = np.asarray(rle, dtype=np.int64)
    if data.size and (data.min() < 0 or data.max() > 255):
        raise RLEError("RLE values must be bytes (0..255)")
    bits = (np.unpackbits(data.astype(np.uint8)) + 48).tobytes()  # b"0101..."
    nbits = len(bits)
    if nbits < 53:
        raise RLEError("RLE stream shorter than its header")
    num = int(bits[0:32], 2)
    word = int(bits[32:37], 2) + 1
    sizes = [int(bits[37 + 4 * k : 41 + 4 * k], 2) + 1 for k in range(4)]
    pos = 53
    out_i = 0
    # Segments in output order: (value, repeat count); a literal word is a segment of 1.
    seg_vals: list[int] = []
    seg_lens: list[int] = []
    while out_i < num:
        size = sizes[int(bits[pos + 1 : pos + 3], 2)] if pos + 3 <= nbits else 0
        end = pos + 3 + size
        if size == 0 or end > nbits:
            raise RLEError(f"RLE stream truncated after {out_i} of {num} values")
        n = int(bits[pos + 3 : end], 2) + 1
        stop = end + (word if bits[pos] == 49 else word * n)
        if stop > nbits:
            raise RLEError(f"RLE stream truncated after {out_i} of {num} values")
        if bits[pos] == 49:
            seg_vals.append(int(bits[end:stop], 2))
            seg_lens.append(n)
        else:
            seg_vals.extend(int(bits[p : p + word], 2) for p in range(end, stop, word))
            seg_lens.extend([1] * n)
        pos = stop
        out_i += n
    vals = np.asarray(seg_vals, dtype=np.int64) & 0xFF
    out = np.repeat(vals.astype(np.uint8), np.asarray(seg_lens, dtype=np.int64))
    # The SDK's decoder fills an array of exactly ``num`` values.
    return out[:num]


def rle_to_mask(rle: Sequence[int] | np.ndarray, height: int, width: int) -> np.ndarray:
    """Decode a brush RLE to an (height, width) bool mask (alpha channel >= 128)."""
    flat = decode_rle(rle)
    if flat.size != height * width * 4:
        raise RLEError(
            f"brush RLE decodes to {flat.size} values, expected {height}x{width}x4 = "
            f"{height * width * 4}"
        )
    return flat.reshape(height, width, 4)[:, :, 3] >= 128
