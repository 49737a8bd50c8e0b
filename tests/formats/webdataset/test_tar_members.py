"""``formats.webdataset.tar_members`` lists exactly the regular files Python's ``tarfile``
lists, for every tar format and compression, and refuses damaged or cut-off tars."""

from __future__ import annotations

import io
import tarfile

import pytest

from npu_data.formats.webdataset.tar_members import NotATar, TarCorrupt, members


def _tar(fmt: int, mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tar:  # type: ignore[call-overload]
        d = tarfile.TarInfo("dir")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        for name, data in [("000001.jpg", b"\xff\xd8" + bytes(range(256)) * 9),
                           ("000001.json", b'{"a": 1}'), ("000002.json", b""),
                           ("block.bin", b"x" * 512),
                           ("p" * 70 + "/" + "n" * 60 + ".json", b"{}"),  # ustar prefix
                           *([] if fmt == tarfile.USTAR_FORMAT else [
                               ("deep/" + "n" * 120 + ".json", b"{}"),  # GNU L / pax path
                               ("d\u00e9j\u00e0/caf\u00e9.json", b"[]")])]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("000001.link")
        link.type, link.linkname = tarfile.SYMTYPE, "000001.jpg"
        tar.addfile(link)
    return buf.getvalue()


def _reference(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
        out = []
        for m in tar:
            if m.isfile():
                f = tar.extractfile(m)
                out.append((m.name, f.read() if f is not None else b""))
        return out


class _Trickle(io.RawIOBase):
    """A stream that returns at most 7 bytes per read, as a slow socket may."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        n = len(self.data) if n < 0 else min(n, 7)
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_the_members_are_tarfiles(fmt: int, mode: str) -> None:
    data = _tar(fmt, mode)
    want = _reference(data)
    assert len(want) == (5 if fmt == tarfile.USTAR_FORMAT else 7)
    assert any(len(n) > 100 for n, _ in want)
    assert list(members(io.BytesIO(data))) == want
    assert list(members(_Trickle(data))) == want


def test_damaged_and_cut_off_tars_are_refused() -> None:
    data = _tar(tarfile.GNU_FORMAT)
    with pytest.raises(NotATar):
        list(members(io.BytesIO(b"not a tar " * 200)))
    with pytest.raises(NotATar, match="empty"):
        list(members(io.BytesIO(b"")))
    second = [m for m in tarfile.open(fileobj=io.BytesIO(data)) if m.isfile()][1]
    bad = bytearray(data)
    bad[second.offset + 10] ^= 0xFF  # a later header's name: its checksum no longer matches
    with pytest.raises(TarCorrupt, match="checksum"):
        list(members(io.BytesIO(bytes(bad))))
    for cut in (700, second.offset + 100, second.offset + 512 + 3):  # header, data
        with pytest.raises(TarCorrupt, match="cut off"):
            list(members(io.BytesIO(data[:cut])))
    assert issubclass(TarCorrupt, tarfile.TarError) and issubclass(NotATar, tarfile.TarError)
