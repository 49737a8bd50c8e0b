"""``torchrun -m npu_data.cli import`` (issue 16.4): two ranks over gloo split the shards, rank 0
writes the manifest; every file is byte-identical to a single-process import."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from npu_data import cli
from npu_data.errors import UserError
from npu_data.shards.distributed_import import Group
from tests.shards.export_maker import make_export

SCRIPT = Path(__file__).with_name("torchrun_scripts.py")
ROOT = Path(__file__).parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file()}


def test_two_ranks_import_byte_identical(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    export = make_export(tmp_path / "proj", n=11)
    args = [str(export), "--shard-size", "2", "--images-root", str(export.parent)]
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    assert cli.main(["import", *args, "--out", str(tmp_path / "single")]) == 0
    log = tmp_path / "shards.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1", "SHARD_LOG": str(log),
           "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(SCRIPT), "import", *args,
           "--out", str(tmp_path / "split")]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("imported 11 of 11 tasks") == 1  # rank 0 reports
    written = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert written == sorted((k % 2, k) for k in range(6))  # each shard once, by its rank
    assert _files(tmp_path / "split") == _files(tmp_path / "single")


def test_group_splits_and_agrees() -> None:
    g = Group(1, 3)
    assert [k for k in range(8) if g.mine(k)] == [1, 4, 7]
    assert Group().gather("x") == ["x"]
    Group().agree(None)
    with pytest.raises(UserError, match="^bad thing$"):  # the rank's own message, unprefixed
        Group().agree("bad thing")
