"""JPEG decoding and lossless re-encoding with libjpeg-turbo, compiled on first use.

``jpeg.cpp`` decodes each sample's crop region alone (``torch.ops.npu_data_jpeg.
decode_regions``; ``jpeg_restarts.cpp`` cuts the MCUs around a region out at restart
markers) and ``jpeg_transcode.cpp`` re-encodes a JPEG losslessly with restart markers
(:func:`with_restarts`). The library links ``-ljpeg``: :func:`jpeg_ops` returns ``None`` where
libjpeg's headers or library are missing (or ``NPU_DATA_NATIVE=0``), and callers decode whole
images with Pillow instead and store JPEGs as they are.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import torch

from npu_data.common.compiled import INCLUDE, load_library

_HERE = Path(__file__).parent
_SOURCES = [_HERE / n for n in ("jpeg.cpp", "jpeg_restarts.cpp", "jpeg_transcode.cpp")]
_HEADERS = [_HERE / "jpeg_restarts.h", INCLUDE / "parallel.h"]
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
log = logging.getLogger(__name__)

# Restart markers every ~32 pixels of an MCU row: a crop then decodes about its own area at a
# cost of a few bytes per interval, which the re-encode's optimised Huffman codes make up for.
RESTART_RUN = 32


def jpeg_ops() -> Any | None:
    """``torch.ops.npu_data_jpeg``, or ``None`` when it cannot be built."""
    if "jpeg" in _STATE:
        return _STATE["jpeg"]
    with _LOCK:
        if "jpeg" not in _STATE:
            result = None
            if os.environ.get("NPU_DATA_NATIVE", "1") != "0":
                try:
                    load_library("npu_data_jpeg", _SOURCES, _HEADERS, "jpeg", ["-ljpeg"])
                    result = torch.ops.npu_data_jpeg
                except Exception as exc:  # no libjpeg headers or library, no compiler, ...
                    log.warning("npu-data: JPEG region decoding unavailable (%s); JPEGs are "
                                "decoded whole with Pillow (same pixels, slower). Install "
                                "libjpeg-turbo's development files (e.g. libjpeg62-turbo-dev) "
                                "to enable it.", str(exc).splitlines()[0][:200])
            _STATE["jpeg"] = result
    return _STATE["jpeg"]


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
