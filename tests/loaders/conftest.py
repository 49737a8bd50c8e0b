"""Fixtures shared by the loader tests."""

from __future__ import annotations

import pytest

from npu_data.annotations.images import ImageOptions
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import make_export


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ShardDataset]:
    """One 23-sample export written as a raw and an encoded store (shards of 5), per module."""
    tmp = tmp_path_factory.mktemp("stores")
    export = make_export(tmp / "proj", n=23)
    out = {}
    for store in ("raw", "encoded"):
        opts = WriteOptions(store=store, shard_size=5,
                            images=ImageOptions(images_root=tmp / "proj"))
        write_dataset(export, tmp / store, opts)
        out[store] = ShardDataset(tmp / store)
    return out
