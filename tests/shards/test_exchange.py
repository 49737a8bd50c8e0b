"""The split import's exchanges through the job's TCP store: plain JSON, exact types back,
every rank's value in rank order, and a store host that waits for the others to leave."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from torch.distributed import TCPStore

from npu_data.shards import distributed_import as di
from npu_data.shards.distributed_import import Exchange, Group
from npu_data.shards.upload import UploadSummary
from tests.support.launchers import free_port


def _stores(world: int) -> list[Any]:
    port = free_port()
    host = TCPStore("127.0.0.1", port, world, True, timedelta(seconds=30),
                    wait_for_workers=False)
    return [host] + [TCPStore("127.0.0.1", port, world, False, timedelta(seconds=30))
                     for _ in range(world - 1)]


def _ranks(world: int, work: Any) -> list[Any]:
    """``work(group)`` on ``world`` threads, each a rank with its own store client."""
    stores = _stores(world)
    out: list[Any] = [None] * world

    def run(r: int) -> None:
        out[r] = work(Group(r, world, exchange=Exchange(stores[r], r, world, hosts=r == 0)))
    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_gather_returns_every_rank_in_order_with_the_same_types() -> None:
    def work(g: Group) -> list[Any]:
        records = {2 * g.rank + 1: {"name": f"shard-{g.rank}", "tasks": (g.rank, g.rank + 2),
                                    "rejected": []}}
        got = [g.gather(g.rank * 10), g.gather(records), g.gather(UploadSummary(g.rank, 5, 1))]
        g.barrier()
        return got

    a, b, c = _ranks(3, work)
    assert a == b == c
    assert a[0] == [0, 10, 20]
    assert a[1][2] == {5: {"name": "shard-2", "tasks": (2, 4), "rejected": []}}
    assert a[2] == [UploadSummary(0, 5, 1), UploadSummary(1, 5, 1), UploadSummary(2, 5, 1)]


def test_agree_raises_the_first_ranks_line_everywhere() -> None:
    def work(g: Group) -> str:
        try:
            g.agree("disk full" if g.rank == 1 else None)
        except di.UserError as exc:
            return str(exc)
        return "no error"

    assert _ranks(2, work) == ["rank 1: disk full"] * 2


def test_only_npu_datas_dataclasses_come_back() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        di._typed({di._TAG: "subprocess:Popen", "v": {}})
    assert di._typed(di._plain({"a": [(1, "x")], di._TAG: 3})) == {"a": [(1, "x")], di._TAG: 3}


def test_the_store_host_waits_until_every_rank_has_left() -> None:
    stores = _stores(2)
    host, guest = Exchange(stores[0], 0, 2, hosts=True), Exchange(stores[1], 1, 2)
    left = threading.Event()

    def leave_host() -> None:
        host.depart(30)
        left.set()
    t = threading.Thread(target=leave_host)
    t.start()
    assert not left.wait(0.5)  # the other rank still reads: the host's server stays
    guest.depart(30)
    t.join(30)
    assert left.is_set()
