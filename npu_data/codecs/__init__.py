"""JPEG decoding and lossless re-encoding with libjpeg-turbo, compiled on first use.

``jpeg.cpp`` decodes each sample's crop region alone (``torch.ops.npu_data_jpeg.
decode_regions``; ``jpeg_restarts.cpp`` cuts the MCUs around a region out at restart
markers) and ``jpeg_transcode.cpp`` re-encodes a JPEG losslessly with restart markers
(:func:`with_restarts`). The library links ``-ljpeg``: :func:`jpeg_ops` returns ``None`` where
libjpeg's headers or library are missing, the kernel cache is refused or read-only
(``common.compiled``), or ``NPU_DATA_NATIVE=0``, and callers decode whole
images with Pillow instead and store JPEGs as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from npu_data.common.compiled import INCLUDE, Library

_HERE = Path(__file__).parent
_LIBRARY = Library(
    "npu_data_jpeg", "npu_data_jpeg",
    [_HERE / n for n in ("jpeg.cpp", "jpeg_restarts.cpp", "jpeg_transcode.cpp")],
    [_HERE / "jpeg_restarts.h", INCLUDE / "parallel.h"], "jpeg",
    "JPEG region decoding unavailable",
    "JPEGs are decoded whole with Pillow (same pixels, slower) and stored without restart "
    "markers.", "Install libjpeg-turbo's development files (e.g. libjpeg62-turbo-dev) to "
    "enable it.", ["-ljpeg"])

# Restart markers every ~32 pixels of an MCU row: a crop then decodes about its own area at a
# cost of a few bytes per interval, which the re-encode's optimised Huffman codes make up for.
RESTART_RUN = 32


_LOADED: Any | None = None  # the ops once loaded (checked on load by ``common.compiled``)


def jpeg_ops() -> Any | None:
    """``torch.ops.npu_data_jpeg``, or ``None`` when it cannot be built."""
    global _LOADED
    if _LOADED is None:
        _LOADED = _LIBRARY.get()
    return _LOADED


def with_restarts(data: bytes, run: int = RESTART_RUN) -> bytes:
    """``data`` re-encoded losslessly with a restart marker every ``run`` pixels or so of each
    MCU row (the same coefficients, markers and pixels), or unchanged where that does not apply
    (progressive, arithmetic-coded, CMYK, restarts already usable, not a JPEG) or the library
    is unavailable."""
    jpeg = jpeg_ops()
    if jpeg is None:
        return data
    out = jpeg.with_restarts(torch.frombuffer(bytearray(data), dtype=torch.uint8), run)
    return out.numpy().tobytes() if out.numel() else data
