"""The ranks of an import split across processes (``torchrun ... -m npu_data.cli import``).

``import_group()`` joins the job torchrun describes (``WORLD_SIZE`` > 1) through the job's
TCP store — torchrun's own (``TORCHELASTIC_USE_AGENT_STORE``), else rank 0's at
``MASTER_ADDR:MASTER_PORT`` (``torch.distributed.rendezvous("env://")``), or the default
process group's where the caller initialised one — or returns the single-process ``Group``.
The few small objects an import exchanges go through that store as plain JSON (``Exchange``):
no process group, no collective thread, nothing to tear down. Rank ``r`` of ``W`` writes
shards ``k`` with ``k % W == r`` (``Group.mine``); ``write_dataset`` gathers every rank's
completion records and rank 0 writes ``rejected.jsonl`` and the manifest, after every shard is
in place. The bytes are those of a single-process import: a shard's bytes depend only on its
input rows and the options.

A rank that fails raises a flag in the store (``stop_all``); the others see it after the
shard they are writing (``stopping``), and every rank then stops with the failing rank's one
line (``agree``): no manifest, the finished shards kept for ``--resume``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import orjson

from npu_data.errors import UserError


class Exchange:
    """Every rank's objects, through the job's key-value store: exchange ``n`` of a process
    reads the keys exchange ``n`` of every rank wrote (ranks exchange in the same order)."""

    def __init__(self, store: Any, rank: int, world: int, hosts: bool = False) -> None:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.store, self.rank, self.world = store, rank, world
        self.hosts = hosts  # this process runs the store's server (rank 0 without torchrun's)
        self.prefix = f"npu-data/import/{attempt}"
        self.count = 0

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (plain data, dataclasses of npu_data), in rank order."""
        key = f"{self.prefix}/x{self.count}"
        self.count += 1
        self.store.set(f"{key}/{self.rank}", orjson.dumps(_plain(obj),
                                                         option=orjson.OPT_SERIALIZE_NUMPY))
        return [obj if r == self.rank else _typed(orjson.loads(self.store.get(f"{key}/{r}")))
                for r in range(self.world)]

    def depart(self, wait: float) -> None:
        """Say this rank is done with the store; the rank that runs its server waits (at most
        ``wait`` s) until every other rank has said so, so none loses it mid-read."""
        self.store.set(f"{self.prefix}/left/{self.rank}", b"1")
        if self.hosts:
            keys = [f"{self.prefix}/left/{r}" for r in range(self.world) if r != self.rank]
            try:
                self.store.wait(keys, timedelta(seconds=wait))
            except Exception:  # noqa: BLE001 - a rank that died: its launcher reports it
                pass


_TAG = "__npu_data__"  # the key of a tagged value (a tuple, a dict with other keys, a dataclass)


def _plain(obj: Any) -> Any:
    """``obj`` as JSON values, tuples, non-string keys and npu_data's dataclasses tagged."""
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and _TAG not in obj:
            return {k: _plain(v) for k, v in obj.items()}
        return {_TAG: "items", "v": [[_plain(k), _plain(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_plain(v) for v in obj]
        return items if isinstance(obj, list) else {_TAG: "tuple", "v": items}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return {_TAG: f"{cls.__module__}:{cls.__qualname__}",
                "v": {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    return obj


def _typed(obj: Any) -> Any:
    """The inverse of ``_plain``; only npu_data's dataclasses are made again."""
    if isinstance(obj, list):
        return [_typed(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    tag = obj.get(_TAG)
    if tag is None:
        return {k: _typed(v) for k, v in obj.items()}
    if tag == "items":
        return {_typed(k): _typed(v) for k, v in obj["v"]}
    if tag == "tuple":
        return tuple(_typed(v) for v in obj["v"])
    module, _, name = str(tag).partition(":")
    cls = getattr(importlib.import_module(module), name, None) if module.startswith(
        "npu_data.") else None
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise ValueError(f"an exchanged value of unknown type {tag!r}")
    return cls(**{k: _typed(v) for k, v in obj["v"].items()})


@dataclass(frozen=True)
class Group:
    """``rank`` of ``world`` importing processes and the collectives an import needs."""

    rank: int = 0
    world: int = 1
    shared: bool = True  # every rank sees the same output folder (False: one per node)
    job: str = ""  # this import's id, the same on every rank (``begin``): its failure flag
    exchange: Exchange | None = field(default=None, compare=False, repr=False)

    def mine(self, k: int) -> bool:
        """Whether shard ``k`` is this rank's to write."""
        return k % self.world == self.rank

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order: JSON values, tuples, dicts with any plain keys
        and npu_data's dataclasses (records, messages, upload summaries), nothing pickled."""
        if self.world == 1:
            return [obj]
        if self.exchange is None:
            raise RuntimeError("a Group of several ranks without a store: use import_group()")
        return self.exchange.gather(obj)

    def barrier(self) -> None:
        """Wait until every rank got here."""
        if self.world > 1:
            self.gather(None)

    def agree(self, error: str | None) -> None:
        """Raise the first rank's error on every rank (so all stop with the same one line,
        naming that rank when there are several)."""
        errors = self.gather(error)
        for r, e in enumerate(errors):
            if e is not None:
                raise UserError(f"rank {r}: {e}" if self.world > 1 else e)

    def begin(self) -> Group:
        """This group with a fresh ``job`` id from rank 0 (a collective: every rank calls it)."""
        if self.world == 1:
            return self
        return replace(self, job=self.gather(uuid.uuid4().hex if self.rank == 0 else "")[0])

    def stop_all(self, error: str) -> None:
        """Tell the other ranks, without waiting for them, that this import fails."""
        store = self.exchange.store if self.job and self.exchange else None
        if store is not None:
            store.set(f"npu-data/import/{self.job}/failed", f"rank {self.rank}: {error}")
            store.add(f"npu-data/import/{self.job}/failures", 1)

    def stopping(self) -> bool:
        """Whether a rank has failed (``stop_all``): stop after the current shard."""
        store = self.exchange.store if self.job and self.exchange else None
        # a counter read by adding 0: Store.check does not exist in torch 2.1
        return store is not None and store.add(f"npu-data/import/{self.job}/failures", 0) > 0


def _default_store() -> Any:
    """The key-value store of the default process group (None: no group)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


SINGLE = Group()
_JOINED: Exchange | None = None  # the exchange import_group made (one per process)
DEPART_WAIT = 60.0  # seconds the store's host waits at most for the other ranks to leave


def import_group() -> Group:
    """This process's import group: torchrun's ranks, through the job's store, when
    ``WORLD_SIZE`` > 1."""
    global _JOINED
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return SINGLE
    if _JOINED is None:
        store = _default_store()
        if store is not None:  # the caller's process group: its store
            import torch.distributed as dist

            _JOINED = Exchange(store, dist.get_rank(), dist.get_world_size())
        else:
            if not os.environ.get("MASTER_ADDR"):
                raise UserError(f"WORLD_SIZE={world} without MASTER_ADDR: start a split import "
                                "with torchrun (e.g. torchrun --nproc_per_node 2 -m "
                                "npu_data.cli import ...), or unset WORLD_SIZE")
            import torch.distributed as dist

            store, rank, size = next(dist.rendezvous("env://"))
            agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"
            _JOINED = Exchange(store, rank, size, hosts=rank == 0 and not agent)
    return Group(_JOINED.rank, _JOINED.world, exchange=_JOINED)


def leave(group: Group, failed: bool = False) -> None:
    """Leave the job's store (after the last exchange): every rank says it is done, and the
    rank that runs the store's server waits for the others before it lets go of it, so no
    rank loses the store mid-read. Nothing to tear down, nothing timed: a failed import
    (``failed``) leaves the same way."""
    global _JOINED
    if group.world > 1 and group.exchange is not None and group.exchange is _JOINED:
        _JOINED.depart(DEPART_WAIT)
        _JOINED = None
