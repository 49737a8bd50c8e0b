"""Hostile tars (issue 30, classes 3 and 5): members larger than their cap (gzip bombs) are
refused from the headers while streaming, in bounded memory, leaving nothing on disk for the
refused sample; a member name seen twice is refused, never silently replaced; samples are
grouped by their full path (two folders' x.jpg are two samples); a JPEG header claiming a
huge image is refused before the crop plans buffers from it."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from PIL import Image

from npu_data.errors import UserError
from npu_data.formats.webdataset import read_wds_samples, wds_to_table
from npu_data.formats.webdataset.reader import TarAccess, WdsSample
from npu_data.formats.webdataset.stages import planned
from npu_data.formats.webdataset.tar_members import MAX_META, TarLimit, members


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, produced as they are read (a large member never in memory here)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def _png(w: int = 8, h: int = 6) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _tar(path: Path, entries: list[tuple[str, Any]], mode: str = "w") -> Path:
    """A tar of ``entries`` (name, bytes or (size, stream))."""
    with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                info.size, src = data
            else:
                info.size, src = len(data), io.BytesIO(data)
            tar.addfile(info, src)
    return path


def _json(key: str) -> bytes:
    return orjson.dumps({"image_ext": "png", "index": 0, "task_id": 1, "height": 6,
                         "width": 8, "key": key})


def test_gzip_bomb_refused_while_streaming(tmp_path: Path) -> None:
    """A 256 MiB member in a 256 KiB .tar.gz: refused from its header, memory stays small,
    and the import leaves the earlier sample's image only."""
    bomb = _tar(tmp_path / "bomb.tar.gz", [
        ("a.png", _png()), ("a.json", _json("a")),
        ("b.png", (256 << 20, _Zeros(256 << 20))), ("b.json", _json("b"))], "w:gz")
    assert bomb.stat().st_size < 1 << 20
    access = TarAccess(max_member_bytes=16 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as err:
            list(read_wds_samples([str(bomb)], access))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # never the member: its header says what it is
    msg = str(err.value)
    assert "\n" not in msg and str(bomb) in msg and "'b.png'" in msg and "refused" in msg
    media = tmp_path / "media"
    with pytest.raises(UserError, match="b.png"):
        wds_to_table([str(bomb)], media, access)
    assert not media.exists() or not list(media.glob("*b.png"))  # nothing of sample b


def test_sample_and_tar_totals_are_capped(tmp_path: Path) -> None:
    many = _tar(tmp_path / "many.tar", [(f"a.{i}.bin", bytes(300 << 10)) for i in range(8)]
                + [("a.json", _json("a"))])
    with pytest.raises(UserError, match="sample a holds more than"):
        list(read_wds_samples([str(many)], TarAccess(max_member_bytes=1 << 20)))
    big = _tar(tmp_path / "big.tar", [(f"{k}.{e}", bytes(400 << 10) if e == "png" else _json(k))
                                      for k in "abcd" for e in ("png", "json")])
    with pytest.raises(UserError, match="add up to more than"):
        list(read_wds_samples([str(big)], TarAccess(max_unpacked_bytes=1 << 20)))
    with pytest.raises(UserError, match="max_member_bytes"):
        TarAccess(max_member_bytes=0)


def test_huge_pax_record_refused() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("a.json")
        info.pax_headers = {"comment": "x" * (MAX_META + 10)}
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(TarLimit, match="pax header record"):
        list(members(io.BytesIO(buf.getvalue())))
    with pytest.raises(TarLimit, match="more than the 1-byte cap"):
        list(members(io.BytesIO(gzip.compress(_plain_tar())), max_member=1))


def _plain_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("a.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    return buf.getvalue()


@pytest.mark.parametrize("names", [
    ["a.png", "a.json", "a.png"],  # the same member twice, adjacent
    ["a.png", "a.json", "b.png", "b.json", "a.json"],  # a sample's members apart
], ids=["twice", "apart"])
def test_duplicated_member_refused(tmp_path: Path, names: list[str]) -> None:
    data = {"png": _png(), "json": _json("x")}
    tar = _tar(tmp_path / "dup.tar", [(n, data[n.rsplit(".", 1)[1]]) for n in names])
    with pytest.raises(UserError, match="appears twice") as err:
        list(read_wds_samples([str(tar)]))
    assert "\n" not in str(err.value) and str(tar) in str(err.value)


def test_same_file_name_in_two_folders_is_two_samples(tmp_path: Path) -> None:
    other = _png(5, 4)
    tar = _tar(tmp_path / "dirs.tar", [("d1/x.png", _png()), ("d1/x.json", _json("1")),
                                       ("d2/x.png", other), ("d2/x.json", _json("2"))])
    got = list(read_wds_samples([str(tar)]))
    assert [s.annotations["key"] for s in got] == ["1", "2"]  # not merged into one
    assert got[1].image == other


def test_jpeg_header_pixel_claim_refused_before_planning() -> None:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.find(b"\xff\xc0")
    data[sof + 5:sof + 9] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")
    smp = WdsSample("k", bytes(data), {"height": 60000, "width": 60000}, "t.tar")
    with pytest.raises(UserError, match="claims 60000x60000 pixels") as err:
        planned(smp, None)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
