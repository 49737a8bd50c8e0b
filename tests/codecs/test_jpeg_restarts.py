"""Restart markers (codecs/jpeg_restarts.cpp, jpeg_transcode.cpp): the lossless
re-encode keeps every pixel and marker, and a region decoded from the window cut at the
markers equals the full decode cropped — exact and DCT-scaled, for every subsampling."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.codecs import RESTART_RUN, jpeg_ops, with_restarts

JPEG = jpeg_ops()
pytestmark = pytest.mark.skipif(JPEG is None, reason="libjpeg-turbo's headers are not installed")


def _photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Smooth gradients plus noise: every DCT band and both chroma planes carry detail."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (h + w) + 64], axis=-1)
    noise = rng.normal(0, 24, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _jpeg(pixels: np.ndarray, mode: str = "RGB", **save: Any) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, format="JPEG", **save)
    return buf.getvalue()


def _pillow(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _t(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _regions(data: bytes, size: tuple[int, int], boxes: np.ndarray,
             scale: int = 1) -> list[np.ndarray]:
    n = len(boxes)
    out, status = JPEG.decode_regions([_t(data)] * n, torch.from_numpy(boxes),
                                      torch.tensor([size] * n, dtype=torch.int64),
                                      torch.full((n,), scale, dtype=torch.int64))
    assert status.tolist() == [0] * n
    return [o.numpy() for o in out]


def _boxes(rng: np.random.Generator, h: int, w: int, n: int) -> np.ndarray:
    top, left = rng.integers(0, h, n), rng.integers(0, w, n)
    hh = rng.integers(1, h - top + 1)
    ww = rng.integers(1, w - left + 1)
    edges = np.array([[0, 0, h, w], [0, 0, 1, 1], [h - 1, w - 1, 1, 1], [h // 3, 0, h // 3, w]])
    return np.concatenate([np.stack([top, left, hh, ww], 1), edges]).astype(np.int64)


# sizes that are and are not whole MCUs; every subsampling Pillow writes, and greyscale
CASES = [((61, 97), "RGB", 2), ((128, 192), "RGB", 2), ((75, 203), "RGB", 1),
         ((100, 64), "RGB", 0), ((57, 131), "L", 0), ((240, 320), "RGB", 2)]


@pytest.mark.parametrize("size,mode,subsampling", CASES)
def test_restart_reencode_keeps_pixels_and_regions_decode_exactly(
        size: tuple[int, int], mode: str, subsampling: int) -> None:
    rng = np.random.default_rng(size[0] * 1000 + size[1])
    pixels = _photo(rng, *size)
    kw = {} if mode == "L" else {"subsampling": subsampling}
    original = _jpeg(pixels, mode, quality=90, **kw)
    marked = with_restarts(original)
    assert marked != original and b"\xff\xdd" in marked  # a DRI segment was written
    full = _pillow(original)
    assert np.array_equal(_pillow(marked), full)  # lossless: the same coefficients
    assert with_restarts(marked) == marked        # already usable: left as it is
    boxes = _boxes(rng, *size, n=40)
    for box, got in zip(boxes, _regions(marked, size, boxes), strict=True):
        t, lft, h, w = box
        assert np.array_equal(got, full[t:t + h, lft:lft + w]), box
    # DCT-scaled regions equal those of the stream without markers (decoded whole)
    for scale in (2, 4, 8):
        sh, sw = -(-size[0] // scale), -(-size[1] // scale)
        small = _boxes(rng, sh, sw, n=12)
        for a, b in zip(_regions(original, size, small, scale),
                        _regions(marked, size, small, scale), strict=True):
            assert np.array_equal(a, b)


def test_windows_cut_only_the_intervals_a_region_needs() -> None:
    rng = np.random.default_rng(7)
    pixels = _photo(rng, 480, 640)
    marked = with_restarts(_jpeg(pixels, quality=85, subsampling=2))
    cut, where = JPEG.cut_window(_t(marked), 200, 260, 300, 380)
    top, left, h, w = where.tolist()
    assert top <= 200 and top + h >= 260 and left <= 300 and left + w >= 380
    assert top % 16 == 0 and left % 16 == 0 and h <= 64 + 16 and w <= 80 + 2 * RESTART_RUN
    assert cut.numel() < len(marked) / 10
    window = _pillow(cut.numpy().tobytes())
    assert window.shape == (h, w, 3)
    full = _pillow(marked)
    # the window's own decode differs from the image only near its cut edges
    assert np.array_equal(window[8:-8, 8:-8], full[top + 8:top + h - 8, left + 8:left + w - 8])


def test_rows_of_a_whole_row_interval_are_cut_too() -> None:
    """A camera-style interval of one MCU row (cols divide it): windows cut rows only."""
    rng = np.random.default_rng(3)
    pixels = _photo(rng, 200, 150)
    data = _jpeg(pixels, quality=90, subsampling=2, restart_marker_rows=1)
    assert with_restarts(data) == data  # usable as it is
    cut, where = JPEG.cut_window(_t(data), 100, 120, 10, 20)
    assert where.tolist() == [96, 0, 32, 150]
    full = _pillow(data)
    boxes = _boxes(rng, 200, 150, n=30)
    for box, got in zip(boxes, _regions(data, (200, 150), boxes), strict=True):
        t, lft, h, w = box
        assert np.array_equal(got, full[t:t + h, lft:lft + w]), box


def test_streams_it_cannot_mark_are_left_alone() -> None:
    rng = np.random.default_rng(5)
    pixels = _photo(rng, 64, 80)
    for data in (_jpeg(pixels, quality=85, progressive=True),
                 _jpeg(pixels, "CMYK", quality=85),
                 b"\xff\xd8\xff\xe0 not a jpeg at all",
                 _jpeg(pixels, quality=85)[:300]):  # cut off
        assert with_restarts(data) == data
    # an interval that neither divides nor spans whole rows is re-encoded to one that does
    odd = _jpeg(pixels, quality=85, subsampling=2, restart_marker_blocks=3)
    marked = with_restarts(odd)
    assert marked != odd and np.array_equal(_pillow(marked), _pillow(odd))
    assert JPEG.cut_window(_t(odd), 0, 8, 0, 8)[0].numel() == 0


def test_metadata_and_orientation_survive_the_reencode() -> None:
    rng = np.random.default_rng(11)
    pixels = _photo(rng, 90, 120)
    exif = Image.Exif()
    exif[0x0112] = 6
    icc = b"\x00" * 128 + b"not a real profile, but kept byte for byte"
    original = _jpeg(pixels, quality=88, exif=exif.tobytes(), icc_profile=icc,
                     comment=b"kept")
    marked = with_restarts(original)
    assert marked != original
    a, b = Image.open(io.BytesIO(original)), Image.open(io.BytesIO(marked))
    assert b.getexif()[0x0112] == 6
    assert b.info["icc_profile"] == icc and b.info.get("comment") == b"kept"
    assert np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))


def test_regions_decode_into_a_reused_arena() -> None:
    """With an arena large enough the regions are views into it (no allocation per batch),
    the same pixels as without; a small one is left alone."""
    rng = np.random.default_rng(13)
    size = (120, 170)
    data = with_restarts(_jpeg(_photo(rng, *size), quality=90, subsampling=2))
    boxes = _boxes(rng, *size, n=10)
    n = len(boxes)
    args = ([_t(data)] * n, torch.from_numpy(boxes), torch.tensor([size] * n),
            torch.ones(n, dtype=torch.int64))
    want = [o.numpy().copy() for o in JPEG.decode_regions(*args)[0]]
    need = int((boxes[:, 2] * (boxes[:, 3] + 96)).sum()) * 3
    arena = torch.zeros(need, dtype=torch.uint8)
    lo, hi = arena.data_ptr(), arena.data_ptr() + need
    for _ in range(2):  # written again: the same values
        got, status = JPEG.decode_regions(*args, arena)
        assert status.tolist() == [0] * n
        for g, w in zip(got, want, strict=True):
            assert lo <= g.data_ptr() < hi and np.array_equal(g.numpy(), w)
    small = torch.zeros(need - 1, dtype=torch.uint8)
    got, _ = JPEG.decode_regions(*args, small)
    assert not bool(small.any()) and all(np.array_equal(g.numpy(), w)
                                         for g, w in zip(got, want, strict=True))


def test_broken_streams_get_a_status_not_a_crash() -> None:
    """Cut off or corrupted streams, with and without restart markers: no crash; a cut-off
    one gets a non-zero status, not grey rows (the reader then decodes it with Pillow, which
    refuses it naming the sample)."""
    rng = np.random.default_rng(17)
    size = (96, 128)
    plain = _jpeg(_photo(rng, *size), quality=90, subsampling=2)
    marked = with_restarts(plain)
    box = np.array([[40, 50, 30, 40]])
    for data in (plain, marked):
        broken = bytearray(data)
        broken[len(data) // 2:len(data) // 2 + 64] = b"\xff\xd9" * 32  # an EOI mid-scan
        for bad in (data[:len(data) // 3], bytes(broken), b"\xff\xd8\xff\xdb" + b"\x00" * 40):
            out, status = JPEG.decode_regions([_t(bad)], torch.from_numpy(box),
                                              torch.tensor([size]), torch.ones(1, dtype=torch.int64))
            if bad[4:6] == b"\x00\x00" or len(bad) < len(data):  # no header; cut off:
                assert int(status[0]) != 0  # refused, as Pillow refuses them
            assert int(status[0]) != 0 or out[0].shape == (30, 40, 3)
        assert _regions(data, size, box)[0].shape == (30, 40, 3)  # the object is reusable


@pytest.mark.parametrize("subsampling", [2, 1, 0])
def test_regions_at_every_offset_from_a_window_edge(subsampling: int) -> None:
    """Regions starting and ending at every offset from an MCU row and a restart interval
    (the window's edges, which libjpeg treats as image edges) decode exactly."""
    rng = np.random.default_rng(11 + subsampling)
    size = (144, 224)
    original = _jpeg(_photo(rng, *size), quality=90, subsampling=subsampling)
    marked = with_restarts(original)
    full = _pillow(original)
    run = 2 * RESTART_RUN  # the interval period and more, in both directions
    starts = [[16 + k, 32 + k, 1 + k % 5, 3 + k % 7] for k in range(run)]
    ends = [[16, 32, 1 + k, 1 + k] for k in range(run)]
    boxes = np.array(starts + ends, dtype=np.int64)
    for box, got in zip(boxes, _regions(marked, size, boxes), strict=True):
        t, lft, h, w = box
        assert np.array_equal(got, full[t:t + h, lft:lft + w]), box
