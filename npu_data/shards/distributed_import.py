"""The ranks of an import split across processes (``torchrun ... -m npu_data.cli import``).

``import_group()`` joins the job torchrun describes (``WORLD_SIZE`` > 1: a gloo process group
for the few small objects exchanged) or returns the single-process ``Group``. Rank ``r`` of
``W`` writes shards ``k`` with ``k % W == r`` (``Group.mine``); ``write_dataset`` gathers every
rank's completion records and rank 0 writes ``rejected.jsonl`` and the manifest, after every
shard is in place. The bytes are those of a single-process import: a shard's bytes depend only
on its input rows and the options.

A rank that fails raises a flag in the job's store (``stop_all``); the others see it after the
shard they are writing (``stopping``), and every rank then stops with the failing rank's one
line (``agree``): no manifest, the finished shards kept for ``--resume``.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from npu_data.errors import UserError


@dataclass(frozen=True)
class Group:
    """``rank`` of ``world`` importing processes and the collectives an import needs."""

    rank: int = 0
    world: int = 1
    shared: bool = True  # every rank sees the same output folder (False: one per node)
    job: str = ""  # this import's id, the same on every rank (``begin``): its failure flag

    def mine(self, k: int) -> bool:
        """Whether shard ``k`` is this rank's to write."""
        return k % self.world == self.rank

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (plain data: records, messages)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        """Wait until every rank got here."""
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

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
        store = _store() if self.job else None
        if store is not None:
            store.set(f"npu-data/import/{self.job}/failed", f"rank {self.rank}: {error}")
            store.add(f"npu-data/import/{self.job}/failures", 1)

    def stopping(self) -> bool:
        """Whether a rank has failed (``stop_all``): stop after the current shard."""
        store = _store() if self.job else None
        # a counter read by adding 0: Store.check does not exist in torch 2.1
        return store is not None and store.add(f"npu-data/import/{self.job}/failures", 0) > 0


def _store() -> Any:
    """The key-value store of the default process group (None: no group)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


SINGLE = Group()
_JOINED = False  # import_group initialised the process group (leave destroys it)


def import_group() -> Group:
    """This process's import group: torchrun's ranks (gloo) when ``WORLD_SIZE`` > 1."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return SINGLE
    import torch.distributed as dist

    if not dist.is_initialized():
        global _JOINED
        if not os.environ.get("MASTER_ADDR"):
            raise UserError(f"WORLD_SIZE={world} without MASTER_ADDR: start a split import with "
                            "torchrun (e.g. torchrun --nproc_per_node 2 -m npu_data.cli import "
                            "...), or unset WORLD_SIZE")
        dist.init_process_group("gloo")
        _JOINED = True
    return Group(dist.get_rank(), dist.get_world_size())


def leave(group: Group, failed: bool = False) -> None:
    """Leave the process group ``import_group`` joined (after the last collective); one the
    caller had initialised stays.

    torch 2.1's gloo group, destroyed right after a collective, can wait forever: its destructor
    joins the group's worker thread while holding the GIL, and that thread needs the GIL to free
    the collective's tensors. So the group is destroyed only after this thread has let go of
    the GIL for a moment (``GIL_GRACE``), and after a failure (``failed``) not at all: the
    process exits after printing its error."""
    global _JOINED
    if group.world > 1 and _JOINED and not failed:
        import torch.distributed as dist

        if dist.is_initialized():
            time.sleep(GIL_GRACE)
            dist.destroy_process_group()
        _JOINED = False


GIL_GRACE = 0.1  # seconds without the GIL before the group is destroyed (``leave``)
