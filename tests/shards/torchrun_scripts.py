"""Run under torchrun by test_distributed_import.py / test_two_nodes.py.

``import ARGS...``: ``npu_data.cli.main(["import", ...])``, logging each shard a rank writes
to ``$SHARD_LOG``. ``read URL OUT``: one epoch of the remote dataset with the locality sampler,
recording this rank's indices and the shards in this node's cache (``$NODE_CACHE``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _import(argv: list[str]) -> int:
    from npu_data import cli
    from npu_data.shards import writer

    orig = writer.write_shard

    def logged(table: Any, k: int, *args: Any) -> Any:
        with open(os.environ["SHARD_LOG"], "a") as fh:
            fh.write(f"{os.environ['RANK']} {k}\n")
        return orig(table, k, *args)

    writer.write_shard = logged  # type: ignore[assignment]
    return cli.main(["import", *argv])


def _indices(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["index"]) for s in batch]


def _read(url: str, out: str) -> int:
    import torch
    import torch.distributed as dist

    from npu_data.loaders import NpuDistributedSampler
    from npu_data.shards.reader import ShardDataset

    dist.init_process_group("gloo")
    ds = ShardDataset(url, cache_dir=os.environ["NODE_CACHE"])
    sampler = NpuDistributedSampler(ds, seed=3, shard_window=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, sampler=sampler,
                                         collate_fn=_indices)
    seen = [i for batch in loader for i in batch]
    assert ds._remote is not None
    ds._remote.wait_prefetch()
    cached = sorted(p.parent.name for p in ds.path.glob("shard-*/data.bin"))
    with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as fh:
        json.dump({"seen": seen, "cached": cached, "world": dist.get_world_size()}, fh)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    what, rest = sys.argv[1], sys.argv[2:]
    sys.exit(_import(rest) if what == "import" else _read(*rest))
