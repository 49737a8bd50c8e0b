"""A damaged ``LabelStudioDataset`` cache entry: never served, and every message true."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from npu_data.errors import DataCorruption
from npu_data.loaders.datasets import LabelStudioDataset
from tests.support.exports import make_export


def test_damaged_manifest_is_set_aside_and_imported_again(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=3)
    first = LabelStudioDataset(export, cache_dir=tmp_path / "cache")
    want = [first[i]["task_id"] for i in range(len(first))]
    (first.path / "manifest.json").write_bytes(b'{"format": ')  # cut off
    again = LabelStudioDataset(export, cache_dir=tmp_path / "cache")
    with pytest.warns(UserWarning, match="cache entry is damaged.*importing the export again"):
        assert [again[i]["task_id"] for i in range(len(again))] == want
    assert (tmp_path / "cache" / f"{again.key}.damaged" / "manifest.json").read_bytes() == \
        b'{"format": '


def test_damaged_shard_says_delete_the_entry_and_that_imports_again(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=3)
    ds = LabelStudioDataset(export, cache_dir=tmp_path / "cache")
    assert len(ds) == 3
    index = next(ds.path.glob("shard-*/index.npy"))
    index.write_bytes(index.read_bytes()[:-8])  # truncated
    fresh = LabelStudioDataset(export, cache_dir=tmp_path / "cache")
    with pytest.raises(DataCorruption) as err:
        fresh[0]
    msg = str(err.value)
    assert f"delete the cache entry {ds.path}" in msg and "imports the export" in msg
    assert "verify" not in msg and "\n" not in msg
    shutil.rmtree(ds.path)  # what the message says: the next use imports it again
    assert LabelStudioDataset(export, cache_dir=tmp_path / "cache")[0]["task_id"] == 100
