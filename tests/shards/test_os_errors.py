"""Operating-system errors (issue 30, class 5): a full disk, a read-only file system or a
permission refused is one line naming the path and the fix, and nothing already written is
lost. The errors are injected (the suite may run as root, whom permissions do not stop)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from npu_data import cli
from npu_data.common.oserrors import os_error
from npu_data.errors import UserError
from npu_data.shards import download, writer
from npu_data.shards.reader import ShardDataset
from tests.support.exports import make_export


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    return make_export(tmp_path / "proj", n=6)


def _import(export: Path, out: Path, *extra: str) -> int:
    return cli.main(["import", str(export), "--out", str(out), "--shard-size", "2",
                     "--images-root", str(export.parent), *extra])


def test_disk_full_during_import_then_resume(export: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ds"
    real = writer.write_synced
    calls = {"n": 0}

    def full(path: Path, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] > 150:  # the second shard's files: the disk fills up
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(writer, "write_synced", full)
    assert _import(export, out) == 1
    _one_line(capsys, str(out), "No space left on device", "free space", "--resume")
    kept = sorted(p.name for p in out.glob("shard-*"))
    assert kept == ["shard-00000"]  # the complete shard stays
    monkeypatch.setattr(writer, "write_synced", real)
    assert _import(export, out, "--resume") == 0
    assert "1 kept from an earlier run" in capsys.readouterr().out
    assert cli.main(["verify", str(out)]) == 0


def test_read_only_output_folder(export: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ro" / "ds"

    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert _import(export, out) == 1
    _one_line(capsys, str(out), "Read-only file system", "use a writable folder")


def test_cache_permission_denied(tmp_path: Path, export: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "origin"
    assert _import(export, src) == 0
    real_open = os.open

    def denied(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".tmp"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    ds = ShardDataset(f"file://{src}", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(download.os, "open", denied)
    with pytest.raises(UserError) as err:
        ds[0]
    msg = str(err.value)
    assert "\n" not in msg and "Permission denied" in msg and "cache_dir" in msg
    assert str(tmp_path / "cache") in msg


def test_unexpected_os_error_is_one_line_at_the_cli(export: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ds"
    assert _import(export, out) == 0
    capsys.readouterr()
    from npu_data.commands import inspect

    def broken(ds: Any) -> Any:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(out / "shard-00000"))

    monkeypatch.setattr(inspect, "dataset_stats", broken)
    assert cli.main(["inspect", str(out)]) == 1
    _one_line(capsys, "shard-00000", "Input/output error")


def test_os_error_message_names_path_and_fix() -> None:
    msg = str(os_error(OSError(errno.ENOSPC, "No space left on device", "/d/x.bin"),
                       fix="then rerun with --resume"))
    assert msg == ("/d/x.bin: No space left on device — free space there, then rerun "
                   "with --resume")
    msg = str(os_error(PermissionError(errno.EACCES, "Permission denied"), Path("/c")))
    assert msg.startswith("/c: Permission denied — fix the folder's permissions")
