"""Run under torchrun by test_distributed_import.py / test_two_nodes.py.

``import ARGS...``: ``npu_data.cli.main(["import", ...])``, logging each shard a rank writes
to ``$SHARD_LOG``; shard ``$SHARD_ENOSPC`` fails with a full disk, shard ``$SHARD_STALL``
waits until a rank has failed, ``$SHARD_ORDER`` ``j<k``: shard k waits until j has begun. ``read URL OUT``: one epoch of the remote dataset with the
locality sampler, recording this rank's indices and the shards in this node's cache
(``$NODE_CACHE``).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _import(argv: list[str]) -> int:
    from npu_data import cli
    from npu_data.shards import writer

    orig = writer.write_shard

    def logged(table: Any, k: int, out_dir: Path, *args: Any) -> Any:
        with open(os.environ["SHARD_LOG"], "a") as fh:
            fh.write(f"{os.environ['RANK']} {k}\n")
        first, _, then = os.environ.get("SHARD_ORDER", "").partition("<")
        if str(k) == then:
            _wait_for(lambda: f" {first}\n" in Path(os.environ["SHARD_LOG"]).read_text())
        if str(k) == os.environ.get("SHARD_ENOSPC"):
            tmp = out_dir / f".{writer.shard_name(k)}.tmp-{os.getpid()}"
            tmp.mkdir(parents=True)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp / writer.DATA))
        if str(k) == os.environ.get("SHARD_STALL"):
            from npu_data.shards import distributed_import

            assert distributed_import._JOINED is not None  # the job's store, joined
            store = distributed_import._JOINED.store
            _wait_for(lambda: store.add(_RAISED, 0) > 0)  # no Store.check in torch 2.1
        return orig(table, k, out_dir, *args)

    writer.write_shard = logged  # type: ignore[assignment]
    _note_the_flag()
    return cli.main(["import", *argv])


_RAISED = "test/flag-raised"


def _note_the_flag() -> None:
    """``Group.stop_all`` also sets ``_RAISED`` (its own key is the job's)."""
    from npu_data.shards.distributed_import import Group

    orig = Group.stop_all

    def stop_all(self: Group, error: str) -> None:
        orig(self, error)
        assert self.exchange is not None
        self.exchange.store.add(_RAISED, 1)

    Group.stop_all = stop_all  # type: ignore[method-assign]


def _wait_for(done: Callable[[], bool]) -> None:
    """Wait until ``done()`` (at most 30 s)."""
    deadline = time.monotonic() + 30
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


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
