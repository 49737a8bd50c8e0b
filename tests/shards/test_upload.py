"""``npu-data import --out s3://...`` (issue 16.3): staged locally, uploaded through s3fs to
moto's S3 server, manifest last; a killed upload resumes; verify and inspect take the URL;
no credential in any output."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
from pathlib import Path
from typing import Any

import pytest

from npu_data import cli
from npu_data.shards import upload
from npu_data.shards.reader import ShardDataset
from tests.support.compare import same_nested
from tests.support.exports import make_export
from tests.support.s3_server import BUCKET, KEY, SECRET

N = 9


@pytest.fixture
def export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    return make_export(tmp_path / "proj", n=N)


def _import(export: Path, out: str, *extra: str) -> int:
    return cli.main(["import", str(export), "--out", out, "--shard-size", "3",
                     "--images-root", str(export.parent), *extra])


def _remote_files(s3: dict[str, Any], prefix: str) -> dict[str, bytes]:
    fs = s3["fs"]
    fs.invalidate_cache()
    base = f"{BUCKET}/{prefix}"
    return {p[len(base) + 1:]: fs.cat_file(p) for p in fs.find(base)}


def _local_files(root: Path) -> dict[str, bytes]:
    """Every file of dataset ``root`` but its own hidden records (the owner record stays
    local: a URL is claimed by its lease)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".")
                                       for part in p.relative_to(root).parts)}


def _no_secret(text: str) -> None:
    assert SECRET not in text and KEY not in text and "fAkEsEcReT" not in text


def test_import_to_url_verify_inspect(s3: dict[str, Any], export: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    url = f"s3://{BUCKET}/up1"
    assert _import(export, url) == 0
    out = capsys.readouterr()
    _no_secret(out.out + out.err)
    assert f"into {url} " in out.out and "manifest last" in out.out
    assert _import(export, str(tmp_path / "local")) == 0  # the same import, on disk
    capsys.readouterr()
    local = _local_files(tmp_path / "local")
    assert _remote_files(s3, "up1") == local  # every file, byte for byte
    assert not list((tmp_path / "cache" / "upload").glob("*/*"))  # staging removed
    ds = ShardDataset(url, cache_dir=tmp_path / "read")
    here = ShardDataset(tmp_path / "local")
    for i in (0, 4, 8):
        same_nested(here[i], ds[i])
    assert cli.main(["verify", url]) == 0
    assert cli.main(["inspect", url]) == 0
    out = capsys.readouterr()
    assert f"{url}: ok" in out.out and f"dataset {url}" in out.out
    assert "samples" in out.out and f" {N}\n" in out.out
    _no_secret(out.out + out.err)
    # a second import onto the same prefix is refused unless resuming
    assert _import(export, url) == 1
    err = capsys.readouterr().err
    assert "already holds" in err and "--resume" in err and err.count("\n") == 1
    _no_secret(err)
    # a rotten remote object: verify names the shard and file, exit 1
    rotten = f"{BUCKET}/up1/shard-00001/data.bin"
    data = bytearray(s3["fs"].cat_file(rotten))
    data[7] ^= 0xFF
    s3["fs"].pipe_file(rotten, bytes(data))
    os.environ["NPU_DATA_CACHE"] = str(tmp_path / "cache2")  # a fresh node
    assert cli.main(["verify", url]) == 1
    err = capsys.readouterr().err
    assert "shard-00001" in err and "data.bin" in err and "upload the dataset" in err
    _no_secret(err)


def _killed_upload(export: str, url: str) -> None:
    orig = upload.Uploader.upload
    calls = {"n": 0}

    def dies(self: upload.Uploader, rels: list[str], listing: dict[str, Any]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the second shard folder: half of it, then killed
            orig(self, rels[:len(rels) // 2], listing)
            os._exit(3)
        return orig(self, rels, listing)

    upload.Uploader.upload = dies  # type: ignore[method-assign]
    _import(Path(export), url)


def test_killed_upload_resumes(s3: dict[str, Any], export: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    url = f"s3://{BUCKET}/up2"
    p = mp.get_context("fork").Process(target=_killed_upload, args=(str(export), url))
    p.start()
    p.join(120)
    assert p.exitcode == 3
    half = _remote_files(s3, "up2")
    assert half and "manifest.json" not in half  # a reader sees no dataset yet
    with pytest.raises(Exception, match="not found"):
        ShardDataset(url, cache_dir=tmp_path / "early")
    assert _import(export, url, "--resume") == 0
    out = capsys.readouterr().out
    _no_secret(out)
    assert _import(export, str(tmp_path / "local")) == 0
    local = _local_files(tmp_path / "local")
    assert _remote_files(s3, "up2") == local
    got = re.search(r"uploaded (\d+) files \(.*\) to \S+, (\d+) already there", out)
    assert got is not None, out
    sent, skipped = int(got.group(1)), int(got.group(2))
    shard_files = [f for f in half if "/" in f]
    assert skipped == len(shard_files)  # every file that arrived before the kill is kept
    assert sent + skipped == len(local)
    ds = ShardDataset(url, cache_dir=tmp_path / "read")
    same_nested(ShardDataset(tmp_path / "local")[5], ds[5])


def test_storage_endpoint_flag_and_cache_dir(s3: dict[str, Any], export: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--storage-endpoint names the store for --out, verify and inspect (no environment
    variable), --cache-dir is where verify and inspect cache the shards."""
    monkeypatch.delenv("NPU_DATA_S3_ENDPOINT")
    url, ep = f"s3://{BUCKET}/flag", s3["endpoint"]
    assert _import(export, url, "--storage-endpoint", ep) == 0
    assert _remote_files(s3, "flag")["manifest.json"]
    cache = tmp_path / "verify-cache"
    assert cli.main(["verify", url, "--storage-endpoint", ep, "--cache-dir", str(cache)]) == 0
    assert list(cache.rglob("data.bin"))  # the shards were checked from the named cache
    assert cli.main(["inspect", url, "--storage-endpoint", ep,
                     "--cache-dir", str(tmp_path / "inspect-cache")]) == 0
    out = capsys.readouterr()
    assert f"{url}: ok" in out.out and f"dataset {url}" in out.out
    _no_secret(out.out + out.err)
