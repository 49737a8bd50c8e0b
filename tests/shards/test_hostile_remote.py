"""A hostile bucket (issue 30, class 1): a manifest whose shard or file names try to leave the
node-local cache. On the loopback S3 server (moto, as tests/shards/test_remote.py): no file
outside the cache is created, changed or deleted, by opening, reading, evicting or
`npu-data verify s3://...`, which refuses with one line."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from npu_data.cli import main
from npu_data.common.paths import UnsafeName, inside, safe_name
from npu_data.errors import DataCorruption
from npu_data.shards.reader import ShardDataset
from tests.support.s3_server import BUCKET


def _tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``root``: kind, mode and content digest (files) or link target."""
    out: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p)] = ("link", st.st_mode, os.readlink(p))
            elif p.is_dir():
                out[str(p)] = ("dir", st.st_mode, "")
            else:
                out[str(p)] = ("file", st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _outside(tree: dict[str, Any], cache: Path) -> dict[str, Any]:
    return {p: v for p, v in tree.items() if not Path(p).is_relative_to(cache)}


def _upload_hostile(s3: dict[str, Any], prefix: str, edit: Any) -> str:
    """The local dataset uploaded under ``prefix`` with its manifest changed by ``edit``
    (which may also upload objects under the hostile names, as an attacker would)."""
    fs, local = s3["fs"], s3["local"].path
    fs.put(str(local) + "/", f"{BUCKET}/{prefix}", recursive=True)
    manifest = orjson.loads((local / "manifest.json").read_bytes())
    edit(manifest, fs, f"{BUCKET}/{prefix}", local)
    fs.pipe(f"{BUCKET}/{prefix}/manifest.json", orjson.dumps(manifest))
    return f"s3://{BUCKET}/{prefix}"


def _shard_escape(m: dict[str, Any], fs: Any, base: str, local: Path) -> None:
    m["shards"][0]["name"] = "../../victim"  # cache_dir/<ident>/../../victim
    for fname in m["shards"][0]["files"]:
        fs.put(str(local / "shard-00000" / fname), f"{base}/../../victim/{fname}")


def _absolute_file(m: dict[str, Any], fs: Any, base: str, local: Path) -> None:
    files = m["shards"][1]["files"]
    files[str(_VICTIM_FILE)] = files.pop("index.npy")
    fs.put(str(local / "shard-00001" / "index.npy"), f"{base}/shard-00001/{_VICTIM_FILE}")


def _dotdot_file(m: dict[str, Any], fs: Any, base: str, local: Path) -> None:
    files = m["shards"][2]["files"]
    files["../../../victim/keep.txt"] = files.pop("data.bin")
    fs.put(str(local / "shard-00002" / "data.bin"), f"{base}/shard-00002/../../../victim/keep.txt")


def _nul_and_dot(m: dict[str, Any], fs: Any, base: str, local: Path) -> None:
    m["shards"][0]["name"] = "."
    m["shards"][1]["name"] = "shard\x00-00001"


_VICTIM_FILE = Path("/nonexistent")  # set per test (an absolute path inside tmp_path)


@pytest.mark.parametrize("attack", [_shard_escape, _absolute_file, _dotdot_file, _nul_and_dot],
                         ids=["shard ../../", "absolute file", "file ../", "shard . and NUL"])
def test_hostile_manifest_touches_nothing_outside_the_cache(
        s3: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        attack: Any) -> None:
    global _VICTIM_FILE
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    (victim / "index.npy").write_text("also precious")
    _VICTIM_FILE = victim / "index.npy"
    cache = tmp_path / "cache"
    url = _upload_hostile(s3, f"hostile-{attack.__name__}", attack)
    before = _tree(tmp_path)

    with pytest.raises(DataCorruption) as err:  # opening: the manifest is refused
        ds = ShardDataset(url, cache_dir=cache, cache_limit=1)
        for i in range(len(ds)):  # (never reached: the names are refused first)
            ds[i]
    msg = str(err.value)
    assert "\n" not in msg and "refused" in msg and url in msg
    assert _outside(_tree(tmp_path), cache) == _outside(before, cache)

    code = main(["verify", url, "--cache-dir", str(cache)])
    out, errs = capsys.readouterr()
    assert code == 1 and "ok" not in out
    lines = errs.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "refused" in lines[0]
    assert _outside(_tree(tmp_path), cache) == _outside(before, cache)
    assert (victim / "keep.txt").read_text() == "precious"
    assert not list(cache.glob("*/shard-*"))  # nothing downloaded either


def test_planted_link_in_the_cache_is_not_followed_nor_evicted(s3: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    """A shard folder of the cache replaced by a link out of it (another local user, a bad
    script): reads refuse it, eviction never removes what it points at."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    cache = tmp_path / "cache"
    ds = ShardDataset(s3["url"], cache_dir=cache)
    ds[0]  # shard-00000 cached
    ds[8]  # shard-00002 cached
    root = ds.path
    link = root / "shard-00000"
    for p in link.iterdir():
        p.unlink()
    link.rmdir()
    link.symlink_to(victim, target_is_directory=True)
    before = _tree(victim)
    fresh = ShardDataset(s3["url"], cache_dir=cache)
    with pytest.raises(UnsafeName, match="leads out of"):
        fresh[0]
    fresh._remote.cache_limit = 0  # evict everything it may
    fresh._remote.evict()
    assert _tree(victim) == before and (victim / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b", "a\x00b",
                                  "x" * 256, 7, None])
def test_safe_name_refuses(name: Any) -> None:
    with pytest.raises(UnsafeName):
        safe_name(name, "m.json")


def test_safe_name_and_inside_accept_plain_names(tmp_path: Path) -> None:
    for ok in ("shard-00000", "ann.boxes.xywh.npy", "..hidden", "a..b", "é"):
        assert safe_name(ok, "m.json") == ok
    (tmp_path / "real").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "in").symlink_to(tmp_path / "root" / "x")  # a link inside: fine
    assert inside(tmp_path / "root", "in") == tmp_path / "root" / "in"
    (tmp_path / "root" / "out").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafeName):
        inside(tmp_path / "root", "out")
