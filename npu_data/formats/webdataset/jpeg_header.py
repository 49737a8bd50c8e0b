"""A JPEG's size and orientation from its markers, without Pillow (``stages.plain_jpeg_size``
asks per tar sample; opening the file with Pillow parsed every table and cost more than
planning the crop).

:func:`scan` walks the segments from SOI to the first SOF: the SOF's precision, height, width
and component count, the EXIF orientation of the first APP1 ``Exif`` segment (IFD0 tag
0x0112), and whether an XMP segment mentions an orientation. It answers only for headers it
reads completely and returns None for anything else, so the caller can ask Pillow instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_XMP = b"http://ns.adobe.com/xap/1.0/\x00"


@dataclass(frozen=True)
class Header:
    """What the caller needs of a JPEG header."""

    height: int
    width: int
    components: int
    precision: int
    orientation: int  # EXIF 0x0112 (1 when absent)
    exif_segments: int
    xmp_orientation: bool  # an XMP packet that names an orientation


def _orientation(tiff: bytes) -> int | None:
    """IFD0's orientation (1 when absent), None when the TIFF structure is not readable."""
    if len(tiff) < 8 or tiff[:4] not in (b"II*\x00", b"MM\x00*"):
        return None
    end = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(end + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return None
    (count,) = struct.unpack_from(end + "H", tiff, ifd)
    if ifd + 2 + 12 * count > len(tiff):
        return None
    for i in range(count):
        tag, kind, n = struct.unpack_from(end + "HHI", tiff, ifd + 2 + 12 * i)
        if tag == 0x0112:
            if kind != 3 or n != 1:
                return None
            return int(struct.unpack_from(end + "H", tiff, ifd + 2 + 12 * i + 8)[0])
    return 1


def scan(data: bytes) -> Header | None:
    """The header of the JPEG ``data``, or None when it is not read completely here."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, n = 2, len(data)
    orientation, exif, xmp = 1, 0, False
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # EOI or SOS before any SOF
            return None
        (length,) = struct.unpack_from(">H", data, pos + 2)
        body = data[pos + 4:pos + 2 + length]
        if length < 2 or len(body) != length - 2:
            return None
        if marker in _SOF:
            if len(body) < 6:
                return None
            precision, height, width, components = struct.unpack_from(">BHHB", body, 0)
            if height == 0 or width == 0:  # the height comes later (DNL): not read here
                return None
            return Header(height, width, components, precision, orientation, exif, xmp)
        if marker == 0xE1 and body.startswith(b"Exif\x00\x00"):
            exif += 1
            if exif == 1:
                found = _orientation(body[6:])
                if found is None:
                    return None
                orientation = found
        elif marker == 0xE1 and body.startswith(_XMP):
            xmp = xmp or b"Orientation" in body
        pos += 2 + length
    return None
