"""Turn one image reference into the payload a shard stores (raw pixels or encoded bytes)."""

from __future__ import annotations

import importlib
import io
import os
import zlib
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from npu_data.errors import UserError, UserValueError
from npu_data.shards.format import ENC_JPEG, ENC_OTHER, ENC_PNG, ENC_RAW

MAX_PIXELS = 1 << 28  # the most pixels a stored image may claim (the reader's check)
IMPORT_MAX_PIXELS = 89_478_485  # an import's default cap: Pillow's own warning threshold


@dataclass
class Payload:
    """Bytes stored for one sample and what they decode to."""

    data: bytes
    height: int
    width: int
    channels: int
    encoding: int
    crc32: int
    original: tuple[int, int] = (0, 0)  # the photo's (height, width) as shown, before max_side


def parse_reencode(spec: str) -> int:
    """Quality of ``jpeg:Q`` (1-100); UserError otherwise."""
    kind, _, q = spec.partition(":")
    if kind != "jpeg" or not q.isdigit() or not 1 <= int(q) <= 100:
        raise UserValueError(f"{{reencode={spec}}}: expected jpeg:Q with Q in 1..100 (e.g. "
                             "jpeg:90)", option="reencode")
    return int(q)


def options_record(options: Any) -> dict[str, Any] | None:
    """Image options as plain JSON (paths as strings) for the manifest."""
    if options is None:
        return None
    d = asdict(options) if is_dataclass(options) and not isinstance(options, type) else dict(
        vars(options))
    return {k: (os.fspath(v) if isinstance(v, os.PathLike) else list(v) if isinstance(v, tuple)
                else v) for k, v in sorted(d.items())}


def _images() -> Any:
    return importlib.import_module("npu_data.annotations.images")


def _resolve(ref: str, options: Any) -> Path:
    return Path(_images().resolve_image(ref, options))


def _load(path: Path, max_pixels: int, alpha: str = "white") -> tuple[np.ndarray, bool]:
    """The pixels the annotator saw (``alpha="drop"``: Pillow's ``convert("RGB")``), and
    whether the file decodes to them with a plain ``convert("RGB")`` (what the shard reader
    does with stored bytes); an image of more than ``max_pixels`` pixels is refused from its
    header, before it is decoded."""
    pixels, plain = _images().load_image_as_shown(path, max_pixels, alpha)
    return np.asarray(pixels), bool(plain)


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror}) — check the file") from None


def scaled_size(height: int, width: int, max_side: int | None) -> tuple[int, int]:
    """Stored (height, width): the longest side brought down to ``max_side``, never up."""
    if not max_side or max(height, width) <= max_side:
        return height, width
    s = max_side / max(height, width)
    return max(1, round(height * s)), max(1, round(width * s))


def resize(pixels: np.ndarray, max_side: int | None) -> np.ndarray:
    """``pixels`` scaled with Pillow BILINEAR (antialiased) so the longest side <= max_side."""
    h, w = pixels.shape[:2]
    nh, nw = scaled_size(h, w, max_side)
    if (nh, nw) == (h, w):
        return pixels
    return np.asarray(Image.fromarray(pixels).resize((nw, nh), Image.Resampling.BILINEAR))


def _encoding(data: bytes) -> int:
    if data[:3] == b"\xff\xd8\xff":
        return ENC_JPEG
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ENC_PNG
    return ENC_OTHER


def _restarts(data: bytes) -> bytes:
    """The JPEG ``data`` with restart markers (``npu_data.codecs.with_restarts``: lossless;
    a crop then decodes only its region); torch loads only when a JPEG is stored."""
    from npu_data.codecs import with_restarts

    return with_restarts(data)


def prefetch(refs: list[str], options: Any) -> dict[str, Any]:
    """Remote references among ``refs`` fetched in parallel (ref -> path or UserError)."""
    if options is None or not hasattr(options, "download_workers"):
        return {}
    return dict(_images().prefetch(refs, options))


def make_payload(ref: str, o: Any, fetched: Any = None) -> Payload:
    """The payload of image ``ref`` under write options ``o`` (UserError if unusable).

    Encoded stores keep the file's own bytes where the reader's Pillow decode gives the
    pixels the annotator saw (JPEGs re-encoded losslessly with restart markers unless
    ``o.restart_markers`` is off), else a PNG of those pixels (images with alpha or 16-bit
    samples; see ``npu_data.annotations.images.decode_image``)."""
    if isinstance(fetched, UserError):
        raise fetched
    path = Path(fetched) if fetched is not None else _resolve(ref, o.images)
    pixels, plain = _load(path, o.max_pixels, getattr(o, "alpha", "white"))
    original = (int(pixels.shape[0]), int(pixels.shape[1]))
    if o.store == "raw" or o.reencode:
        pixels = np.ascontiguousarray(resize(pixels, o.max_side))
        h, w = pixels.shape[:2]
        if o.store == "raw":
            data = pixels.tobytes()
            return Payload(data, h, w, 3, ENC_RAW, zlib.crc32(data), original)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=parse_reencode(o.reencode))
        data = _restarts(buf.getvalue()) if o.restart_markers else buf.getvalue()
        return Payload(data, h, w, 3, ENC_JPEG, zlib.crc32(data), original)
    h, w = pixels.shape[:2]
    if not plain:  # alpha, transparency, 16-bit: the file would read back otherwise, so the
        data = _png(pixels)  # pixels are stored, losslessly, as the annotator saw them
        return Payload(data, h, w, 3, ENC_PNG, zlib.crc32(data), original)
    data = _read_bytes(path)
    kind = _encoding(data)
    if kind == ENC_JPEG and o.restart_markers:
        data = _restarts(data)
    return Payload(data, h, w, 3, kind, zlib.crc32(data), original)
