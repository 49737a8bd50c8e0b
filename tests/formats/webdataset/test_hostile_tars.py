"""Hostile WebDataset tars refused at import with one line naming the tar and the sample or
member: a member name that is not UTF-8, label and control ids outside the sample's lists."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from npu_data.cli import main
from npu_data.formats.webdataset import read_wds_samples
from npu_data.formats.webdataset.stages import decode
from npu_data.tools.sample_data import make_sample_project


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    tmp = tmp_path_factory.mktemp("hostile-wds")
    proj = make_sample_project(tmp / "proj", n_images=2, width=96, height=64)
    assert main(["import", str(proj.export_path), "--out", str(tmp / "ds"), "--store",
                 "encoded", "--images-root", str(proj.root)]) == 0
    assert main(["export-wds", str(tmp / "ds"), "--out", str(tmp / "t-%03d.tar")]) == 0
    with tarfile.open(tmp / "t-000.tar") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]


def _tar(path: Path, items: list[tuple[str, bytes]], encoding: str = "utf-8") -> Path:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding=encoding) as tar:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _one_error(capsys: pytest.CaptureFixture[str], rc: int, *words: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_member_name_not_utf8_refuses_the_tar(tmp_path: Path, members: list[tuple[str, bytes]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    renamed = [(n.replace("000000001", "00000\xe91"), d) for n, d in members]
    tar = _tar(tmp_path / "latin.tar", renamed, encoding="latin-1")  # the byte 0xe9 alone
    rc = main(["import", str(tar), "--out", str(tmp_path / "ds")])
    _one_error(capsys, rc, "latin.tar", "b'00000\\xe91.", "not printable UTF-8", "rename it")
    assert not (tmp_path / "ds").exists()
    newline = [(n.replace("000000001", "0000\n1"), d) for n, d in members]
    with pytest.raises(Exception, match="not printable") as err:
        list(read_wds_samples([str(_tar(tmp_path / "nl.tar", newline))]))
    assert "\n" not in str(err.value)


def _edit(members: list[tuple[str, bytes]], change: Callable[[dict[str, Any]], None]
          ) -> list[tuple[str, bytes]]:
    out = []
    for name, data in members:
        if name == "000000001.json":
            ann = json.loads(data)
            change(ann)
            data = json.dumps(ann).encode()
        out.append((name, data))
    return out


@pytest.mark.parametrize(("field", "value", "words"), [
    ("label", 999, "label id 999 is not one of the"),
    ("label", -2, "label id -2"),
    ("control", 500, "control id 500 is not one of the sample's"),
])
def test_ids_outside_the_lists_are_refused(tmp_path: Path, members: list[tuple[str, bytes]],
                                           capsys: pytest.CaptureFixture[str], field: str,
                                           value: int, words: str) -> None:
    def change(ann: dict[str, Any]) -> None:
        ann["boxes"][field][0] = value
    tar = _tar(tmp_path / "ids.tar", _edit(members, change))
    rc = main(["import", str(tar), "--out", str(tmp_path / "ds")])
    _one_error(capsys, rc, "ids.tar", "sample 000000001", words, "export-wds")
    assert not (tmp_path / "ds").exists()
    bad = [s for s in read_wds_samples([str(tar)]) if s.key == "000000001"]
    with pytest.raises(Exception, match=words):  # the stream refuses it the same way
        decode(bad[0])
    good = [s for s in read_wds_samples([str(tar)]) if s.key == "000000000"]
    assert decode(good[0])["boxes.label"].size > 0
