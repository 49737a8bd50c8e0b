"""The colour kernels' lookup tables, made on the host with Pillow's own conversions.

- ``grey`` (256, 256, 256) uint8: Pillow's ``L`` of every (R, G, B) (16 MB).
- ``hue_in`` (512, 512) int32 (host only): ``H * 256 + max - min`` of every colour (``H``
  Pillow's HSV hue), indexed by ``(R - B + 255, G - B + 255)``: both depend on the differences
  alone, and ``S`` on ``(max - min, max)`` alone (``tests/transforms/test_hue_tables.py``
  checks all 2**24 colours against Pillow); unreachable entries are 0.
- ``hue_rgb`` (256, 256, 256) int32: ``(H * 256 + max - min) * 256 + max`` of every (R, G, B)
  (64 MB; from ``hue_in``), the row of ``hue_out`` flattened: a hue shift adds ``shift * 2**16``
  modulo ``2**24`` and reads the RGB there, two gathers and two integer ops.
- ``hue_out`` (2**24, 3) uint8: Pillow's HSV -> RGB of ``(H, S(max - min, max), max)``
  at ``(H * 256 + max - min) * 256 + max`` (48 MB; :func:`hue_out_np` flattened), so a hue
  shift is two gathers with no ``S`` in between.
- ``blend_key`` / ``blend_src`` (514, 256): the rows of a per-sample blend table
  (:func:`npu_data.transforms._kernels.color.blend_tables`): rows 0-255 contrast with key
  (mean) = row, 256-511 saturation with key (grey) = row - 256, 512 brightness (key 0), 513
  the identity; ``src`` picks each entry's product ``factor * (value - key)``.

Built once per process in about two seconds and kept on each device they are used on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from npu_data.transforms._kernels import DeviceTables, compiling, to_device

ROW_SATURATION, ROW_BRIGHTNESS, ROW_IDENTITY = 256, 512, 513
BLEND_ROWS = 514
PRODUCTS = 4  # contrast, saturation, brightness, identity: 511 products (d = -255..255) each


@dataclass(frozen=True)
class ColorTables:
    """The tables on one device (see the module docstring)."""

    grey: torch.Tensor
    hue_rgb: torch.Tensor
    hue_out: torch.Tensor
    blend_key: torch.Tensor
    blend_src: torch.Tensor


def grey_np() -> np.ndarray:
    """(256, 256, 256) uint8: ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16``."""
    v = np.arange(256, dtype=np.int64)
    s = (v.reshape(-1, 1, 1) * 19595 + v.reshape(1, -1, 1) * 38470 + v.reshape(1, 1, -1) * 7471
         + 0x8000)
    return (s >> 16).astype(np.uint8)


def hue_in_np() -> np.ndarray:
    """(512, 512) int32: ``H * 256 + max - min`` of the colour with differences (R - B, G - B)
    = (i - 255, j - 255) and min 0, by Pillow's ``convert("HSV")``."""
    from PIL import Image

    d = np.arange(-255, 257, dtype=np.int64)
    d1, d2 = np.meshgrid(d, d, indexing="ij")
    b = np.maximum(0, np.maximum(-d1, -d2))
    r, g = b + d1, b + d2
    ok = (np.maximum(r, np.maximum(g, b)) <= 255) & (d1 <= 255) & (d2 <= 255)
    rgb = np.where(ok[..., None], np.stack([r, g, b], -1), 0).astype(np.uint8)
    hsv = np.asarray(Image.fromarray(rgb).convert("HSV"))
    cr = np.maximum(r, np.maximum(g, b)) - np.minimum(r, np.minimum(g, b))
    return np.where(ok, hsv[..., 0].astype(np.int32) * 256 + cr, 0).astype(np.int32)


def hue_rgb_np(hue_in: np.ndarray) -> np.ndarray:
    """(256, 256, 256) int32: ``hue_in[R - B + 255, G - B + 255] * 256 + max(R, G, B)`` of
    every colour (``hue_in``: :func:`hue_in_np`), one blue level at a time (no 2**24 int64
    temporaries)."""
    v = np.arange(256, dtype=np.int32)
    r, g = v.reshape(-1, 1), v.reshape(1, -1)
    out = np.empty((256, 256, 256), dtype=np.int32)
    for b in range(256):
        mx = np.maximum(np.maximum(r, g), b)
        out[:, :, b] = hue_in[r - b + 255, g - b + 255] * 256 + mx
    return out


def saturation_np() -> np.ndarray:
    """(256, 256) uint8: Pillow's HSV ``S`` of a colour with ``max - min = i``, ``max = j``
    (0 where i > j)."""
    from PIL import Image

    cr, mx = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    ok = cr <= mx
    lo = np.where(ok, mx - cr, 0)
    rgb = np.stack([np.where(ok, mx, 0), lo, lo], -1).astype(np.uint8)
    return np.where(ok, np.asarray(Image.fromarray(rgb).convert("HSV"))[..., 1], 0
                    ).astype(np.uint8)


def hue_out_np() -> np.ndarray:
    """(65536, 256, 3) uint8: Pillow's HSV -> RGB of (H = i // 256, S(i % 256, j), V = j)."""
    from PIL import Image

    sat = saturation_np()
    c = np.arange(1 << 24, dtype=np.uint32)
    h, cr, v = (c >> 16) & 255, (c >> 8) & 255, c & 255
    hsv = np.stack([h, sat[cr, v], v], -1).astype(np.uint8).reshape(4096, 4096, 3)
    rgb = np.asarray(Image.frombytes("HSV", (4096, 4096), hsv.tobytes()).convert("RGB"))
    return np.array(rgb.reshape(65536, 256, 3))  # a writable copy


def blend_rows_np() -> tuple[np.ndarray, np.ndarray]:
    """``(key (514, 256) float32, src (514, 256) int64)``: each blend-table entry is
    ``trunc(clamp(key + products[src]))`` (products flattened (4 * 511,))."""
    row = np.arange(BLEND_ROWS).reshape(-1, 1)
    value = np.arange(256).reshape(1, -1)
    key = np.where(row < ROW_SATURATION, row, np.where(row < ROW_BRIGHTNESS, row - 256, 0))
    which = np.where(row < ROW_SATURATION, 0, np.where(row < ROW_BRIGHTNESS, 1,
                                                       np.where(row == ROW_BRIGHTNESS, 2, 3)))
    src = which * 511 + (value - key + 255)
    return (np.broadcast_to(key, src.shape).astype(np.float32), src.astype(np.int64))


_GREY = DeviceTables("the grey table")


def grey_table(device: torch.device) -> torch.Tensor:
    """:func:`grey_np` on ``device`` (16 MB; made once, kept per device; the colour tables'
    ``grey`` is this one)."""
    return _GREY.get("grey", device, lambda: torch.from_numpy(grey_np()))


_HOST: ColorTables | None = None
_ON: dict[str, ColorTables] = {}
_LOCK = threading.Lock()


def color_tables(device: torch.device) -> ColorTables:
    """The tables on ``device``: made once per process, copied once per device."""
    global _HOST
    key = str(device)
    got = _ON.get(key)
    if got is not None:
        return got
    if compiling():
        raise RuntimeError(f"the colour tables for {device} are made on first use, not inside "
                        "a torch.compile trace: run the transform once eagerly first")
    with _LOCK:
        if _HOST is None:
            bkey, bsrc = blend_rows_np()
            _HOST = ColorTables(grey_table(torch.device("cpu")),
                                torch.from_numpy(hue_rgb_np(hue_in_np())),
                                torch.from_numpy(hue_out_np()).view(-1, 3), torch.from_numpy(bkey),
                                torch.from_numpy(bsrc))
        host = _HOST
        got = _ON.get(key)
        if got is None:
            got = host if device.type == "cpu" else ColorTables(
                grey_table(device), *(to_device(t, device) for t in (
                    host.hue_rgb, host.hue_out, host.blend_key, host.blend_src)))
            _ON[key] = got
    return got


__all__ = ["BLEND_ROWS", "PRODUCTS", "ROW_BRIGHTNESS", "ROW_IDENTITY", "ROW_SATURATION",
           "ColorTables", "color_tables", "grey_np", "grey_table", "hue_in_np", "hue_out_np", "hue_rgb_np",
           "saturation_np"]
