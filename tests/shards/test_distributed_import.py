"""``torchrun -m npu_data.cli import`` (issue 16.4): two ranks over gloo split the shards, rank 0
writes the manifest; every file is byte-identical to a single-process import."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from npu_data import cli
from npu_data.errors import UserError
from npu_data.shards.distributed_import import Group
from tests.shards.conftest import BUCKET, KEY, SECRET
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
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(SCRIPT), "import", *args, "--out", url]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert SECRET not in res.stdout + res.stderr and KEY not in res.stdout + res.stderr
    assert f"into {url} " in res.stdout and res.stdout.count("uploaded ") == 1
    fs = s3["fs"]
    fs.invalidate_cache()
    base = f"{BUCKET}/split"
    remote = {p[len(base) + 1:]: fs.cat_file(p) for p in fs.find(base)}
    assert remote == _files(tmp_path / "single")
    written = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert written == sorted((k % 2, k) for k in range(4))


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
    group = _NodeZero(0, 2)
    object.__setattr__(group, "peer", tmp_path / "peer")
    with pytest.raises(UserError, match="shard-00001 \\(written by rank 1\\) is not in this "
                                        "folder .* every rank sees"):
        write_dataset(export, tmp_path / "node0", opts, group)
    assert not (tmp_path / "node0" / "manifest.json").exists()
    assert (tmp_path / "node0" / "shard-00002").is_dir()  # its own shards were written
