"""This process's place in a distributed job: torch.distributed when initialised, else the
launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else a single process."""

from __future__ import annotations

import os
from typing import NamedTuple


class Place(NamedTuple):
    """``rank`` of ``world`` processes; ``local_rank`` on this node."""

    rank: int
    world: int
    local_rank: int


def place() -> Place:
    """Where this process runs (rank, world, local_rank); see the module docstring."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Place(dist.get_rank(), dist.get_world_size(), local)
    return Place(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), local)
