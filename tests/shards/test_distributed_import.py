"""``torchrun -m npu_data.cli import`` (issue 16.4): two ranks over gloo split the shards, rank 0
writes the manifest; every file is byte-identical to a single-process import."""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from npu_data import cli
from npu_data.errors import UserError
from npu_data.shards.distributed_import import DEPART_WAIT, SINGLE, Group
from tests.support.exports import make_export
from tests.support.launchers import ROOT, one_node, two_nodes
from tests.support.s3_server import BUCKET, KEY, SECRET

SCRIPT = Path(__file__).with_name("torchrun_scripts.py")


def _files(root: Path) -> dict[str, bytes]:
    """Every file of dataset ``root`` but its own hidden records (the owner record stays
    local: a URL is claimed by its lease)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".")
                                       for part in p.relative_to(root).parts)}


@pytest.mark.slow
def test_two_ranks_import_byte_identical(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    export = make_export(tmp_path / "proj", n=11)
    args = [str(export), "--shard-size", "2", "--images-root", str(export.parent)]
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    assert cli.main(["import", *args, "--out", str(tmp_path / "single")]) == 0
    log = tmp_path / "shards.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1", "SHARD_LOG": str(log),
           "PYTHONPATH": str(ROOT)}
    rc, out, err = one_node([str(SCRIPT), "import", *args, "--out", str(tmp_path / "split")],
                            env)
    assert rc == 0, err[-3000:]
    assert out.count("imported 11 of 11 tasks") == 1  # rank 0 reports
    written = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert written == sorted((k % 2, k) for k in range(6))  # each shard once, by its rank
    assert _files(tmp_path / "split") == _files(tmp_path / "single")


def _two_nodes(args: list[str], env: dict[str, str]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each of two torchrun launchers (one rank each)."""
    return two_nodes([str(SCRIPT), "import", *args], [env, env])


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["corrupt", "disk-full"])
def test_a_rank_failing_midway_stops_every_rank(tmp_path: Path, fault: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 (node 1) meets a corrupt image (--strict) or a full disk in shard 3, its second,
    while rank 0 writes shard 2; rank 0 stops after it, without writing shard 4. Each rank
    exits 1 with the one line naming rank 1 and the cause, no manifest is written, the
    finished shards stay and ``--resume`` after the fix gives a single-process import's files."""
    export = make_export(tmp_path / "proj", n=11)
    args = [str(export), "--shard-size", "2", "--images-root", str(export.parent), "--strict"]
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    assert cli.main(["import", *args, "--out", str(tmp_path / "single")]) == 0
    good = (export.parent / "img6.png").read_bytes()  # task 6: shard 3, rank 1's second
    log, out = tmp_path / "shards.log", tmp_path / "split"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1", "SHARD_LOG": str(log),
           "PYTHONPATH": str(ROOT), "SHARD_ORDER": "2<3", "SHARD_STALL": "2"}
    if fault == "corrupt":
        (export.parent / "img6.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
        cause = r"task 106 \(#6\): \S*img6\.png: cannot decode the image .* corrupt"
    else:
        env["SHARD_ENOSPC"] = "3"
        cause = (r"cannot write \S*/\.shard-00003\.tmp-\d+/data\.bin \(No space left on "
                 r"device\) — free space or fix the folder, then rerun with --resume")
    t0 = time.monotonic()
    for rc, _, err in _two_nodes([*args, "--out", str(out)], env):
        assert rc == 1, err[-3000:]
        lines = [ln for ln in err.splitlines() if "error" in ln.lower() or "Traceback" in ln]
        assert lines[0].startswith("error: rank 1: ") and re.fullmatch(f"error: rank 1: {cause}.*",
                                                                        lines[0]), err[-3000:]
        assert "Traceback" not in err.split("failed (exitcode")[0]  # torchrun's own after it
    # nobody waited out a timeout (the shortest: the store's host waits DEPART_WAIT for the
    # others); the run itself took 10-35 s, the longer on a loaded machine
    assert time.monotonic() - t0 < DEPART_WAIT
    assert not (out / "manifest.json").exists()
    kept = sorted(p.name for p in out.glob("shard-*"))
    assert kept == ["shard-00000", "shard-00001", "shard-00002"]  # rank 0 stopped: no shard 4
    (export.parent / "img6.png").write_bytes(good)
    for var in ("SHARD_ENOSPC", "SHARD_ORDER", "SHARD_STALL"):
        env.pop(var, None)
    log.unlink()
    (rc0, got, err0), (rc1, _, err1) = _two_nodes([*args, "--out", str(out), "--resume"], env)
    assert rc0 == rc1 == 0, err0[-3000:] + err1[-3000:]
    assert "(6 shards (3 kept from an earlier run)" in got
    written = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert written == [(0, 4), (1, 3), (1, 5)]
    assert _files(out) == _files(tmp_path / "single")


def test_group_splits_and_agrees() -> None:
    g = Group(1, 3)
    assert [k for k in range(8) if g.mine(k)] == [1, 4, 7]
    assert Group().gather("x") == ["x"]
    Group().agree(None)
    with pytest.raises(UserError, match="^bad thing$"):  # the rank's own message, unprefixed
        Group().agree("bad thing")


def test_two_ranks_import_to_a_url(s3: dict[str, Any], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank uploads its own shards, rank 0 the manifest after them: the bucket then holds
    exactly the files of a single-process import to disk, and no credential is printed."""
    export = make_export(tmp_path / "proj", n=7)
    args = [str(export), "--shard-size", "2", "--images-root", str(export.parent)]
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    assert cli.main(["import", *args, "--out", str(tmp_path / "single")]) == 0
    log = tmp_path / "shards.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SHARD_LOG": str(log), "PYTHONPATH": str(ROOT),
           "NPU_DATA_CACHE": str(tmp_path / "cache")}
    url = f"s3://{BUCKET}/split"
    rc, out, err = one_node([str(SCRIPT), "import", *args, "--out", url], env)
    assert rc == 0, err[-3000:]
    assert SECRET not in out + err and KEY not in out + err
    assert f"into {url} " in out and out.count("uploaded ") == 1
    fs = s3["fs"]
    fs.invalidate_cache()
    base = f"{BUCKET}/split"
    remote = {p[len(base) + 1:]: fs.cat_file(p) for p in fs.find(base)}
    assert remote == _files(tmp_path / "single")
    written = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert written == sorted((k % 2, k) for k in range(4))


@dataclass(frozen=True)
class _Alone(Group):
    """Rank 0 of 2 whose peer is fine: records what ``stop_all`` was told."""

    told: list[str] = field(default_factory=list)

    def gather(self, obj: Any) -> list[Any]:
        return [obj, None]

    def stop_all(self, error: str) -> None:
        self.told.append(error)


def test_a_failing_rank_tells_the_others_then_stops() -> None:
    from npu_data.shards.writer import _fail_all

    g = _Alone(0, 2)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/d/.shard-00000.tmp-1/data.bin")
    with pytest.raises(UserError, match=r"^rank 0: cannot write /d/\.shard-00000\.tmp-1/data"
                                        r"\.bin \(No space left on device\) — free space"):
        _fail_all(g, full)
    _fail_all(g, KeyError("x"))  # a bug: the caller re-raises it, with its traceback
    assert g.told[1].startswith("KeyError: 'x' (an internal error")
    _fail_all(SINGLE, KeyError("x"))  # one process: nothing to tell


@dataclass(frozen=True)
class _NodeZero(Group):
    """Rank 0 of 2 whose peer wrote its shards on another machine (``peer``'s records)."""

    peer: Path = Path()

    def gather(self, obj: Any) -> list[Any]:
        if isinstance(obj, dict):  # the completion records: the peer's are real, elsewhere
            import orjson

            odd = sorted(self.peer.glob("shard-*/complete.json"))[1::2]
            return [obj, {int(p.parent.name.split("-")[1]): orjson.loads(p.read_bytes())
                          for p in odd}]
        return [obj, 0 if isinstance(obj, int) else None]

    def barrier(self) -> None:
        pass


def test_a_folder_not_shared_by_the_ranks_is_refused(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.annotations.images import ImageOptions
    from npu_data.shards.writer import WriteOptions, write_dataset

    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    export = make_export(tmp_path / "proj", n=5)
    opts = WriteOptions(images=ImageOptions(images_root=export.parent), shard_size=2)
    write_dataset(export, tmp_path / "peer", opts)
    group = _NodeZero(0, 2, peer=tmp_path / "peer")
    with pytest.raises(UserError, match="shard-00001 \\(written by rank 1\\) is not in this "
                                        "folder .* every rank sees"):
        write_dataset(export, tmp_path / "node0", opts, group)
    assert not (tmp_path / "node0" / "manifest.json").exists()
    assert (tmp_path / "node0" / "shard-00002").is_dir()  # its own shards were written
