"""The regular files of a tar stream, in order, as ``(name, bytes)``: ustar/GNU/pax headers
read directly (one 512-byte block and a checksum per member; Python's ``tarfile`` builds a
``TarInfo`` with a dozen decoded fields per member and was a tenth of a WebDataset stream's
cost). Compressed tars (gzip, bzip2, xz) are decompressed as a stream and read the same way.

Names are only keys here: nothing is written to disk. Pax ``path``/``size`` records and GNU
long names (``L``) apply to the next member; directories, links, devices and pax global
headers are skipped (their data read through, never held). A bad checksum, a truncated member
or a stream that ends before the end-of-archive blocks raises :class:`TarCorrupt` (a
``tarfile.TarError``).

Memory is bounded whatever the tar claims: a member's size is read from its header before
its data, and a member larger than ``max_member`` bytes (a header record larger than
``MAX_META``), or a tar whose members add up to more than ``max_total`` bytes unpacked,
raises :class:`TarLimit` before the data is read — a gzip bomb is refused while streaming,
after at most one block of it was decompressed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
import zlib
from collections.abc import Iterator
from typing import Any

BLOCK = 512
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_REGULAR = (b"0", b"\x00", b"7")  # file, old-style file, contiguous file
_META = (b"x", b"g", b"L", b"K")  # pax and GNU records: read into memory, so capped
MAX_META = 1 << 20  # bytes of one pax / GNU long-name record
DEFAULT_MAX_MEMBER = 256 << 20  # bytes of one member (a sample's image or JSON)
DEFAULT_MAX_TOTAL = 64 << 30  # bytes of all members of one tar, unpacked


class TarCorrupt(tarfile.TarError):
    """The tar stream is cut off or its headers are damaged."""


class NotATar(tarfile.TarError):
    """The stream does not start with a tar header."""


class TarLimit(Exception):
    """A member or the whole tar is larger than its cap (the message says which)."""


class _Unpacked:
    """A gzip, bzip2 or xz stream's decompressed bytes; damaged or cut-off data raises
    ``TarCorrupt``."""

    def __init__(self, raw: Any, head: bytes) -> None:
        if head.startswith(b"\x1f\x8b"):
            self.file: Any = gzip.GzipFile(fileobj=raw, mode="rb")
        elif head.startswith(b"BZh"):
            self.file = bz2.BZ2File(raw, mode="rb")
        else:
            self.file = lzma.LZMAFile(raw, mode="rb")

    def read(self, n: int = -1) -> bytes:
        try:
            return bytes(self.file.read(n))
        except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as exc:
            raise TarCorrupt(f"the compressed stream is damaged or cut off ({exc})") from None


def _read(stream: Any, n: int) -> bytes:
    """Exactly ``n`` bytes (short reads of remote streams joined), fewer only at the end."""
    out = stream.read(n)
    while len(out) < n:
        more = stream.read(n - len(out))
        if not more:
            break
        out += more
    return out


class _Replay:
    """``head`` then the rest of ``stream``: a stream whose first block was peeked."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self.head, self.stream = head, stream

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n < 0:
                out, self.head = self.head + self.stream.read(), b""
                return bytes(out)
            out, self.head = self.head[:n], self.head[n:]
            return bytes(out) if len(out) == n else bytes(out) + _read(self.stream, n - len(out))
        return bytes(self.stream.read(n))


def _number(field: bytes) -> int:
    """A header number: octal text, or base-256 (GNU) when the first byte's top bit is set."""
    if field and field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] & 0x40 else value
    text = field.split(b"\x00", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarCorrupt(f"a header number is not octal ({text[:12]!r})") from None


def _valid(header: bytes) -> bool:
    try:
        _checked(header)
    except TarCorrupt:
        return False
    return True


def _checked(header: bytes) -> None:
    stored = _number(header[148:156])
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    if stored != unsigned:  # old tars summed signed bytes
        signed = unsigned - 2 * sum(1 for b in header[:148] + header[156:] if b > 127)
        if stored != signed:
            raise TarCorrupt("a header's checksum does not match (damaged tar)")


def _pax(data: bytes) -> dict[str, str]:
    """Pax extended header records ``"<len> key=value\\n"``."""
    out, pos = {}, 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError:
            raise TarCorrupt("a pax header record has no length") from None
        if length <= 0 or pos + length > len(data):
            raise TarCorrupt("a pax header record is cut off")
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _skip(stream: Any, n: int) -> int:
    """Read ``n`` bytes of ``stream`` without keeping them; the count read."""
    done = 0
    while done < n:
        block = stream.read(min(n - done, 1 << 20))
        if not block:
            break
        done += len(block)
    return done


def _member_name(header: bytes) -> str:
    name = header[:100].split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
    prefix = header[345:500].split(b"\x00", 1)[0]
    if header[257:263] == b"ustar\x00" and prefix:
        name = prefix.decode("utf-8", "surrogateescape") + "/" + name
    return name


def members(stream: Any, max_member: int = DEFAULT_MAX_MEMBER,
            max_total: int = DEFAULT_MAX_TOTAL) -> Iterator[tuple[str, bytes]]:
    """``(name, data)`` of every regular file of the tar ``stream``, in order; ``TarLimit``
    before reading a member larger than ``max_member`` bytes or past ``max_total`` bytes
    of members in all."""
    first = _read(stream, BLOCK)
    if first.startswith(_COMPRESSED):
        stream = _Unpacked(_Replay(first, stream), first)
        first = _read(stream, BLOCK)
    if len(first) < BLOCK or not any(first) or not _valid(first):
        raise NotATar("no tar header at the start" if first else "empty file")
    header, name, size = first, None, None  # name/size: a pax or GNU override for the next
    total = 0
    while True:
        if len(header) < BLOCK:
            raise TarCorrupt("the tar ends inside a header (cut off)" if header else
                             "the tar ends without its end-of-archive blocks (cut off)")
        if not any(header):  # end of archive
            return
        _checked(header)
        kind = header[156:157]
        length = size if size is not None else _number(header[124:136])
        if length < 0:
            raise TarCorrupt("a member's size is negative (damaged tar)")
        pad = -length % BLOCK
        total += BLOCK + length + pad
        if kind in _META and length > MAX_META:
            raise TarLimit(f"a {'pax' if kind in (b'x', b'g') else 'GNU'} header record of "
                           f"{length} bytes (at most {MAX_META})")
        if kind in _REGULAR and length > max_member:
            raise TarLimit(f"member {(name or _member_name(header))!r} is {length} bytes, more "
                           f"than the {max_member}-byte cap of one member")
        if total > max_total:
            raise TarLimit(f"its members add up to more than the {max_total}-byte cap of one "
                           "tar (unpacked)")
        if kind in _REGULAR or kind in _META:
            data = _read(stream, length)
            got = len(data)
        else:  # directories, links, devices: data (if any) read through, never held
            data, got = b"", _skip(stream, length)
        if got < length:
            raise TarCorrupt("the tar ends inside a member (cut off)")
        if pad and len(_read(stream, pad)) < pad:
            raise TarCorrupt("the tar ends inside a member's padding (cut off)")
        if kind == b"x":
            records = _pax(data)
            name = records.get("path", name)
            try:
                size = int(records["size"]) if "size" in records else None
            except ValueError:
                raise TarCorrupt("a pax size record is not a number") from None
        elif kind == b"L":
            name = data.split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
        elif kind == b"S":
            raise TarCorrupt("a GNU sparse member (not written by any WebDataset tool) — "
                             "write the tar without --sparse")
        elif kind in (b"g", b"K"):
            pass  # global pax records, GNU long link names: nothing a sample needs
        else:
            if kind in _REGULAR:
                yield (name if name is not None else _member_name(header)), data
            name, size = None, None
        header = _read(stream, BLOCK)
