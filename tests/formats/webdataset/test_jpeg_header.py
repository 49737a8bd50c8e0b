"""The JPEG header scan (``formats.webdataset.jpeg_header``) gives exactly Pillow's answer to
``plain_jpeg_size`` for every kind of file a tar may hold, or leaves the question to Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from npu_data.formats.webdataset import jpeg_header
from npu_data.formats.webdataset.stages import _pillow_size, plain_jpeg_size


def _jpeg(mode: str = "RGB", size: tuple[int, int] = (37, 23), orientation: int | None = None,
          progressive: bool = False, xmp: bytes | None = None) -> bytes:
    rng = np.random.default_rng(len(mode) + size[0])
    im = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).convert(mode)
    kw: dict = {"quality": 90, "progressive": progressive}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        exif[0x010F] = "camera"
        kw["exif"] = exif.tobytes()
    if xmp is not None:
        kw["xmp"] = xmp
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _xmp(orientation: int) -> bytes:
    return (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
            b'02/22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/"'
            b' tiff:Orientation="%d"/></rdf:RDF></x:xmpmeta>' % orientation)


CASES = {
    "rgb": _jpeg(), "grey": _jpeg("L"), "cmyk": _jpeg("CMYK"), "progressive":
    _jpeg(progressive=True), "wide": _jpeg(size=(1600, 3)),
    **{f"exif {o}": _jpeg(orientation=o) for o in range(1, 9)},
    "xmp 6": _jpeg(xmp=_xmp(6)), "xmp 1": _jpeg(xmp=_xmp(1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_scan_agrees_with_pillow(name: str) -> None:
    data = CASES[name]
    assert plain_jpeg_size(data) == _pillow_size(data), name


def test_the_scan_reads_what_it_claims_and_leaves_the_rest() -> None:
    head = jpeg_header.scan(CASES["exif 6"])
    assert head is not None and (head.height, head.width, head.components) == (23, 37, 3)
    assert head.orientation == 6 and head.exif_segments == 1 and not head.xmp_orientation
    assert jpeg_header.scan(CASES["xmp 6"]).xmp_orientation  # type: ignore[union-attr]
    assert jpeg_header.scan(CASES["cmyk"]).components == 4  # type: ignore[union-attr]
    assert plain_jpeg_size(CASES["exif 6"]) is None and plain_jpeg_size(CASES["rgb"]) == (23, 37)
    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    data = CASES["rgb"]
    for bad in (b"", png.getvalue(), data[:40], b"\xff\xd8\xff\xda\x00\x02", data[:2] + b"x" * 9):
        assert jpeg_header.scan(bad) is None  # not read here: Pillow decides
