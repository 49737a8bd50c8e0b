"""One importer per dataset URL (issue 30, class 2): the lease object on the loopback S3
server (moto), taken over only when expired or when its holder on this machine is gone."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from npu_data import cli
from npu_data.errors import UserError
from npu_data.shards.lease import LEASE, Lease
from npu_data.shards.storage import RemoteFolder
from tests.support.exports import make_export
from tests.support.s3_server import BUCKET


def _lease(s3: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    fs = s3["fs"]
    fs.invalidate_cache()
    path = f"{BUCKET}/{prefix}/{LEASE}"
    return orjson.loads(fs.cat_file(path)) if fs.exists(path) else None


def _plant(s3: dict[str, Any], prefix: str, owner: str, ttl: float = 600.0,
           **extra: Any) -> None:
    s3["fs"].pipe_file(f"{BUCKET}/{prefix}/{LEASE}", orjson.dumps(
        {"owner": owner, "token": "theirs", "ttl": ttl, **extra}))


def test_one_lease_holder_at_a_time(s3: dict[str, Any]) -> None:
    folder = RemoteFolder(f"s3://{BUCKET}/leased")
    first = Lease(folder)
    first.acquire()
    assert _lease(s3, "leased")["token"] == first.token  # type: ignore[index]
    second = Lease(folder)
    with pytest.raises(UserError, match="another import") as err:
        second.acquire()
    assert "\n" not in str(err.value) and LEASE in str(err.value)
    first.release()
    assert _lease(s3, "leased") is None  # given back: deleted
    second.acquire()
    second.release()


def test_expired_or_dead_lease_is_taken_over(s3: dict[str, Any]) -> None:
    folder = RemoteFolder(f"s3://{BUCKET}/stale")
    _plant(s3, "stale", "elsewhere:1", ttl=1.0)
    time.sleep(2.1)  # expired by the store's clock (its Last-Modified has whole seconds)
    lease = Lease(folder)
    lease.acquire()
    lease.release()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    _plant(s3, "stale", f"{socket.gethostname()}:{gone.stdout.strip()}")
    lease = Lease(folder)  # its holder ran here and exited (killed import): taken over
    lease.acquire()
    lease.release()
    _plant(s3, "stale", "elsewhere:1")  # alive elsewhere: busy
    with pytest.raises(UserError, match="elsewhere:1"):
        Lease(folder).acquire()


def test_lease_is_renewed_while_held(s3: dict[str, Any]) -> None:
    folder = RemoteFolder(f"s3://{BUCKET}/renewed")
    lease = Lease(folder, ttl=3.0)  # the store's clock has whole seconds: a few of them
    lease.acquire()
    first = _lease(s3, "renewed")["expires"]  # type: ignore[index]
    time.sleep(3.5)  # past the first expiry: renewed every ttl/4
    assert _lease(s3, "renewed")["expires"] > first  # type: ignore[index]
    with pytest.raises(UserError, match="another import"):
        Lease(folder).acquire()
    lease.release()


def test_import_refused_while_the_url_is_leased(s3: dict[str, Any], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    export = make_export(tmp_path / "proj", n=3)
    url = f"s3://{BUCKET}/busy"
    _plant(s3, "busy", "elsewhere:1")
    args = ["import", str(export), "--out", url, "--images-root", str(export.parent)]
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another import (elsewhere:1)" in err[0]
    s3["fs"].invalidate_cache()
    assert [p.rsplit("/", 1)[1] for p in s3["fs"].find(f"{BUCKET}/busy")] == [LEASE]
    s3["fs"].rm_file(f"{BUCKET}/busy/{LEASE}")  # that import is over
    assert cli.main(args) == 0
    assert _lease(s3, "busy") is None  # given back when the import ended
    s3["fs"].invalidate_cache()
    assert s3["fs"].exists(f"{BUCKET}/busy/manifest.json")


def test_a_hostile_lease_owner_is_one_bounded_escaped_line(
        s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An owner string the store holds is shown bounded (a 1 MB one does not stall the
    import), escaped (no ESC byte or newline forges a line), and a pid past a C int is no
    traceback."""
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    export = make_export(tmp_path / "proj", n=2)
    url = f"s3://{BUCKET}/hostile"
    args = ["import", str(export), "--out", url, "--images-root", str(export.parent)]
    here = socket.gethostname()
    for owner in ("x\x1b[2J\nerror: forged" + "k" * 1_000_000, f"{here}:99999999999999999999",
                  f"{here}:-5", f"{here}:\u0661\u0662"):
        _plant(s3, "hostile", owner)
        start = time.monotonic()
        assert cli.main(args) == 1
        assert time.monotonic() - start < 30
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "another import (" in lines[0], err[:2000]
        assert "\x1b" not in err and len(err) < 1000
        if owner.startswith("x"):
            assert "(x\\x1b[2J\\nerror: forged" in lines[0] and "characters)" in lines[0]
