"""The import commit fences (issue 36, bug 1) on the loopback S3 server (moto): an import
paused past its lease while another takes over fails at its next write with one line and
leaves the other's dataset as it was; a lease expires by the store's clock, whatever the
nodes' clocks say; a hostile lease object is one line; a renewal refused is not silent."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3fs
from botocore.exceptions import ClientError
from PIL import Image

from npu_data import cli
from npu_data.errors import UserError
from npu_data.shards import lease as lease_module
from npu_data.shards.lease import LEASE, Lease
from npu_data.shards.storage import RemoteFolder
from npu_data.shards.upload import Uploader
from tests.support.exports import make_export
from tests.support.s3_server import BUCKET

N = 12  # 4 shards of 3 (each shard is about 100 objects: its upload takes seconds)
PAUSED = """
import sys
from npu_data.shards import lease
lease.TTL = 2.0  # a short lease: the test pauses this import past it
from npu_data import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _objects(s3: dict[str, Any], prefix: str) -> dict[str, bytes]:
    fs = s3["fs"]
    fs.invalidate_cache()
    base = f"{BUCKET}/{prefix}"
    return {p[len(base) + 1:]: fs.cat_file(p) for p in fs.find(base)}


def _names(s3: dict[str, Any], prefix: str) -> list[str]:
    s3["fs"].invalidate_cache()
    return list(s3["fs"].find(f"{BUCKET}/{prefix}"))


def _import_args(export: Path, url: str, *extra: str) -> list[str]:
    return ["import", str(export), "--out", url, "--shard-size", "3", "--images-root",
            str(export.parent), *extra]


def _other_pixels(export: Path) -> None:
    """The same tasks with other pixels: every shard file differs, the names stay."""
    for png in export.parent.glob("*.png"):
        with Image.open(png) as im:
            im.transpose(Image.Transpose.ROTATE_180).save(png)


def test_an_import_paused_past_its_lease_fails_at_commit(
        s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, prefix = f"s3://{BUCKET}/fenced", "fenced"
    first, second = make_export(tmp_path / "a", n=N), make_export(tmp_path / "b", n=N)
    _other_pixels(second)
    env = {**os.environ, "NPU_DATA_CACHE": str(tmp_path / "node-a"), "NPU_DATA_QUIET": "1"}
    paused = subprocess.Popen([sys.executable, "-c", PAUSED, *_import_args(first, url)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 240
        while not any(p.startswith(f"{BUCKET}/{prefix}/shard-") for p in _names(s3, prefix)):
            assert paused.poll() is None and time.monotonic() < deadline, paused.stderr
            time.sleep(0.02)
        os.kill(paused.pid, signal.SIGSTOP)  # as a scheduler suspends a job, mid-upload
        time.sleep(4.0)  # past its 2 s lease by the store's clock
        monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "node-b"))  # another node
        monkeypatch.setenv("NPU_DATA_QUIET", "1")
        assert cli.main(_import_args(second, url, "--resume")) == 0
        assert cli.main(["verify", url]) == 0
        committed = _objects(s3, prefix)
        assert LEASE not in committed and "manifest.json" in committed
        capsys.readouterr()
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    out, err = paused.communicate(timeout=240)
    assert paused.returncode == 1, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    assert "another import wrote it after this one took the dataset's lease" in errors[0] \
        or "this import lost its lease" in errors[0], errors[0]
    assert "without committing" in errors[0] and "npu-data verify" in errors[0]
    assert _objects(s3, prefix) == committed  # not one object of the other import touched
    assert cli.main(["verify", url]) == 0


def _clock(skew: float) -> types.SimpleNamespace:
    """``time`` as the lease module sees it: this node's clock ``skew`` seconds off."""
    return types.SimpleNamespace(time=lambda: time.time() + skew)


def test_a_lease_expires_by_the_stores_clock_not_the_nodes(
        s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = RemoteFolder(f"s3://{BUCKET}/skewed")
    monkeypatch.setattr(lease_module, "time", _clock(-3 * 600))  # holder's clock behind
    holder = Lease(folder)
    holder.acquire()
    try:
        monkeypatch.setattr(lease_module, "time", _clock(+3 * 600))  # taker's clock ahead
        with pytest.raises(UserError, match="another import") as err:
            Lease(folder).acquire()  # its "expires" is an hour before this node's now
        assert "\n" not in str(err.value)
    finally:
        holder.release()
    fs = s3["fs"]
    fs.pipe_file(f"{BUCKET}/skewed/{LEASE}", orjson.dumps(
        {"owner": "elsewhere:1", "token": "theirs", "ttl": 1.0,
         "expires": time.time() + 3600}))  # its holder's clock an hour ahead
    time.sleep(2.1)  # a second past its ttl by the store's clock (whole seconds)
    taker = Lease(folder)
    taker.acquire()
    taker.release()


@pytest.mark.parametrize("record", [
    b'{"owner": "elsewhere:1", "token": "theirs", "expires": 1e308}',
    b'{"owner": "elsewhere:1", "token": "theirs", "ttl": 1e308}',
    b'{"owner": "elsewhere:1", "token": "theirs", "ttl": -5}',
    b'{"owner": 7, "token": "theirs"}',
    b"\x00not json",
])
def test_a_hostile_lease_object_is_one_line(s3: dict[str, Any], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str],
                                            record: bytes) -> None:
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    export = make_export(tmp_path / "proj", n=3)
    s3["fs"].pipe_file(f"{BUCKET}/hostile/{LEASE}", record)
    assert cli.main(_import_args(export, f"s3://{BUCKET}/hostile")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an import lease npu-data wrote" in err[0], err
    assert LEASE in err[0] and "delete it by hand" in err[0]
    s3["fs"].invalidate_cache()
    assert s3["fs"].cat_file(f"{BUCKET}/hostile/{LEASE}") == record  # left as it was


def test_a_renewal_refused_or_failing_is_said(s3: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    folder = RemoteFolder(f"s3://{BUCKET}/renewals")
    lease = Lease(folder, ttl=0.8)
    lease.acquire()
    real_write = folder.write

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise UserError("s3://.../.npu-data-import.lease: cannot read: connection refused")

    with caplog.at_level(logging.WARNING, logger="npu_data.shards.lease"):
        monkeypatch.setattr(folder, "write", unreachable)
        time.sleep(0.7)  # three renewals fail: said once
        assert sum("could not renew" in r.getMessage() for r in caplog.records) == 1
        monkeypatch.setattr(folder, "write", real_write)
        s3["fs"].pipe_file(f"{BUCKET}/renewals/{LEASE}", orjson.dumps(
            {"owner": "elsewhere:1", "token": "theirs", "ttl": 600.0}))  # taken over
        time.sleep(0.6)
        assert any("another import took it over" in r.getMessage() for r in caplog.records)
    with pytest.raises(UserError, match="this import lost its lease") as err:
        lease.check()
    assert "\n" not in str(err.value)
    lease.release()
    s3["fs"].invalidate_cache()
    assert orjson.loads(s3["fs"].cat_file(f"{BUCKET}/renewals/{LEASE}"))["token"] == "theirs"


def test_objects_are_written_only_if_absent_or_over_the_version_seen(
        s3: dict[str, Any], tmp_path: Path) -> None:
    fs, base = s3["fs"], f"{BUCKET}/objects"
    local = tmp_path / "staging"
    (local / "shard-00000").mkdir(parents=True)
    (local / "shard-00000" / "a.bin").write_bytes(b"mine")
    (local / "manifest.json").write_bytes(b'{"mine": 1}')
    folder = RemoteFolder(f"s3://{base}")
    rel = "shard-00000/a.bin"

    def listed() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        listing = Uploader(local, folder).remote_listing()
        return listing, {r: str(i["ETag"]).strip('"') for r, i in listing.items()}

    fs.pipe_file(f"{base}/{rel}", b"a leftover")  # there when the lease was taken
    listing, seen = listed()
    Uploader(local, folder, seen).upload([rel], listing)  # replaced: the version seen
    fs.invalidate_cache()
    assert fs.cat_file(f"{base}/{rel}") == b"mine"
    fs.pipe_file(f"{base}/{rel}", b"another writer's")  # written after the lease was taken
    with pytest.raises(UserError, match="another import wrote it after this one took") as err:
        Uploader(local, folder, seen).upload([rel], listed()[0])
    assert "\n" not in str(err.value) and rel in str(err.value)
    listing, seen = listed()
    fs.pipe_file(f"{base}/{rel}", b"a writer between listing and write")
    with pytest.raises(UserError, match="another import wrote it"):  # If-Match refused
        Uploader(local, folder, seen).upload([rel], listing)
    fs.rm_file(f"{base}/{rel}")
    listing, seen = listed()
    fs.pipe_file(f"{base}/{rel}", b"created first by another")
    with pytest.raises(UserError, match="another import wrote it"):  # If-None-Match refused
        Uploader(local, folder, seen).upload([rel], listing)
    fs.invalidate_cache()
    assert fs.cat_file(f"{base}/{rel}") == b"created first by another"
    fs.pipe_file(f"{base}/manifest.json", b'{"theirs": 1}')  # a commit after the lease
    with pytest.raises(UserError, match="manifest.json: another import wrote it"):
        Uploader(local, folder, seen).drop_stale_manifest()
    _, seen = listed()
    Uploader(local, folder, seen).drop_stale_manifest()  # the one seen: deleted
    fs.invalidate_cache()
    assert not fs.exists(f"{base}/manifest.json")


def test_a_store_without_conditional_writes_gets_the_lease_only(
        s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    real = s3fs.S3FileSystem._call_s3

    async def no_conditions(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        if method in ("put_object", "complete_multipart_upload", "delete_object") and (
                "IfMatch" in kwargs or "IfNoneMatch" in kwargs):  # a store that lacks them
            raise ClientError({"Error": {"Code": "NotImplemented", "Message": "not here"},
                               "ResponseMetadata": {"HTTPStatusCode": 501}}, method)
        return await real(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", no_conditions)
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    export = make_export(tmp_path / "proj", n=6)
    url = f"s3://{BUCKET}/plain"
    with caplog.at_level(logging.WARNING, logger="npu_data.shards.storage"):
        assert cli.main(_import_args(export, url)) == 0
    said = [r.getMessage() for r in caplog.records if "conditional writes" in r.getMessage()]
    assert len(said) == 1 and "not fenced" in said[0]
    assert cli.main(["verify", url]) == 0
    assert LEASE not in _objects(s3, "plain")
