"""The ranks of an import split across processes (``torchrun ... -m npu_data.cli import``).

``import_group()`` joins the job torchrun describes (``WORLD_SIZE`` > 1: a gloo process group
for the few small objects exchanged) or returns the single-process ``Group``. Rank ``r`` of
``W`` writes shards ``k`` with ``k % W == r`` (``Group.mine``); ``write_dataset`` gathers every
rank's completion records and rank 0 writes ``rejected.jsonl`` and the manifest, after every
shard is in place. The bytes are those of a single-process import: a shard's bytes depend only
on its input rows and the options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from npu_data.errors import UserError


@dataclass(frozen=True)
class Group:
    """``rank`` of ``world`` importing processes and the collectives an import needs."""

    rank: int = 0
    world: int = 1
    shared: bool = True  # every rank sees the same output folder (False: one per node)

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
        """Raise the first rank's error on every rank (so all stop with the same one line)."""
        errors = self.gather(error)
        for r, e in enumerate(errors):
            if e is not None:
                where = f"rank {r}: " if self.world > 1 and r != self.rank else ""
                raise UserError(f"{where}{e}")


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


def leave(group: Group) -> None:
    """Leave the process group ``import_group`` joined (after the last collective); one the
    caller had initialised stays."""
    global _JOINED
    if group.world > 1 and _JOINED:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        _JOINED = False
