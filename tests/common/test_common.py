"""npu_data.common: atomic writes, the cache root, file digests, the process's place."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from npu_data.common.atomic import atomic_file, atomic_write_bytes
from npu_data.common.cache import cache_root, private_dir
from npu_data.common.dist import place
from npu_data.common.hashing import file_sha256
from npu_data.errors import UserError


def test_atomic_file_keeps_the_old_file_when_the_write_fails(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_file(target, suffix=".part") as fh:
        fh.write(b"half of the new")
        raise RuntimeError("cut off")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]  # no temp left
    with atomic_file(target) as fh:
        fh.write(b"new")
    assert target.read_bytes() == b"new"


def test_atomic_file_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "shared", b"x")
        atomic_write_bytes(tmp_path / "mine", b"x", private=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o600


def test_cache_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root("downloads") == tmp_path / "mine" / "downloads"
    monkeypatch.delenv("NPU_DATA_CACHE")
    assert cache_root("remote") == tmp_path / "xdg" / "npu-data" / "remote"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # not absolute: ignored (XDG spec)
    assert cache_root() == tmp_path / "home" / ".cache" / "npu-data"


def test_file_sha256_reads_in_pieces(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    (tmp_path / "f").write_bytes(data)
    assert file_sha256(tmp_path / "f", chunk=999) == hashlib.sha256(data).hexdigest()


def test_place_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert place() == (3, 8, 1)
    assert (place().rank, place().world, place().local_rank) == (3, 8, 1)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var)
    assert place() == (0, 1, 0)


def test_private_dir_is_this_users_made_0700_and_never_changes_a_folder_it_found(
        tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "cache", "the test cache")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    for mode in (0o755, 0o1777):  # the user's own choice; a sticky shared folder as /tmp
        found = tmp_path / f"found-{mode:o}"
        found.mkdir()
        os.chmod(found, mode)
        assert private_dir(found) == found
        assert stat.S_IMODE(found.stat().st_mode) == mode  # left as it was
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)  # others could rename its entries: refused, not changed
    with pytest.raises(UserError, match="the test cache is writable by others .* left as it is"):
        private_dir(loose, "the test cache")
    assert stat.S_IMODE(loose.stat().st_mode) == 0o777
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(UserError, match="the test cache is not a folder"):
        private_dir(tmp_path / "file", "the test cache")
