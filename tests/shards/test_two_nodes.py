"""Two "nodes" (issue 16.5): two torchrun launchers (--nnodes 2, node_rank 0 and 1, master
127.0.0.1), each with its own cache folder, read one epoch of a dataset on moto's S3 server
with the locality sampler: every sample is seen exactly once, each node downloads only the
shards its rank reads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from npu_data.annotations.images import ImageOptions
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import make_export
from tests.support.launchers import ROOT, two_nodes
from tests.support.s3_server import BUCKET

pytestmark = pytest.mark.slow  # two torchrun launchers and the S3 server

N = 12  # shard_size 3: four shards, two per node

SCRIPT = Path(__file__).with_name("torchrun_scripts.py")


def test_two_nodes_read_each_sample_once(s3: dict[str, Any], tmp_path: Path) -> None:
    export = make_export(tmp_path / "proj", n=N)
    write_dataset(export, tmp_path / "ds", WriteOptions(
        images=ImageOptions(images_root=tmp_path / "proj"), shard_size=3))
    s3["fs"].put(str(tmp_path / "ds") + "/", f"{BUCKET}/two", recursive=True)
    url = f"s3://{BUCKET}/two"
    envs = [{**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1", "PYTHONPATH": str(ROOT),
             "NODE_CACHE": str(tmp_path / f"node{node}")} for node in (0, 1)]
    for rc, _, err in two_nodes([str(SCRIPT), "read", url, str(tmp_path)], envs):
        assert rc == 0, err[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    seen = ranks[0]["seen"] + ranks[1]["seen"]
    assert sorted(seen) == list(range(N))  # every sample exactly once
    for r in ranks:  # each node's cache holds only the shards its rank read
        shards = sorted({f"shard-{i // 3:05d}" for i in r["seen"]})
        assert r["cached"] == shards and len(shards) == 2
