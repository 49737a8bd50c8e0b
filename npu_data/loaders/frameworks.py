"""The DataLoader under Hugging Face Accelerate.

``accelerator.prepare(loader)`` rebuilds any torch DataLoader as Accelerate's own
``DataLoaderShard`` from torch's arguments, which would drop this loader's device transform,
prefetching and resume. This loader tells ``prepare`` it is ready as it is (Accelerate's own
``_is_accelerate_prepared`` check, the one that keeps it from wrapping a loader twice), so
``prepare`` returns it unchanged and registers it; Accelerate then marks the instance, and the
next ``len()`` / ``iter()`` takes on what ``prepare`` would have done (``adopt``):

- batches go to ``accelerator.device`` (a loader made with ``device="auto"`` moves there; an
  explicit other device is a one-line error, not a device mismatch deep in the model);
- with several processes the loader's own order (``shuffle=``, no sampler) is split over
  them like ``NpuDistributedSampler``; a ``DistributedSampler`` of that world is kept; any
  other sampler is a one-line error naming the fix (it would serve every sample on every
  process);
- ``save_state`` / ``load_state`` save and load ``loader.state_dict()`` (Accelerate's
  ``use_stateful_dataloader`` hook), so a resumed run continues mid-epoch exactly;
- each pass registers with Accelerate's ``GradientState`` and flags its last batch
  (``end_of_dataloader``), so gradient accumulation syncs at the end of an epoch as it does
  with Accelerate's loaders.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils.data import DistributedSampler, IterableDataset

from npu_data.errors import UserError
from npu_data.loaders.sampler import SequentialOrder, ShuffledOrder


def _state() -> Any:
    mod = sys.modules.get("accelerate.state")
    return None if mod is None else mod.PartialState()


def adopt(loader: Any) -> None:
    """Take Accelerate's device and processes (module doc)."""
    state = _state()
    if state is None:
        return
    device = torch.device(state.device)
    if loader.auto_device:
        loader.device = device
    elif (loader.device.type, loader.device.index or 0) != (device.type, device.index or 0):
        raise UserError(f"accelerator.prepare(DataLoader): the loader feeds {loader.device} but "
                        f"accelerator.device is {device} — pass device=accelerator.device (or "
                        "leave device='auto')")
    world, rank = int(state.num_processes), int(state.process_index)
    if world == 1 or isinstance(loader.dataset, IterableDataset):
        return
    order = loader.order
    if isinstance(order, (ShuffledOrder, SequentialOrder)):
        order.place(world, rank)
    elif not (isinstance(order, DistributedSampler) and order.num_replicas == world):
        raise UserError(f"accelerator.prepare(DataLoader): its {type(order).__name__} would "
                        f"serve every sample on each of the {world} processes — pass "
                        "sampler=NpuDistributedSampler(dataset), or shuffle= without a sampler")


class GradientStateLink:
    """This pass as Accelerate's active dataloader (``end_of_dataloader`` on its last
    batch); does nothing without Accelerate."""

    def __init__(self, loader: Any) -> None:
        mod = sys.modules.get("accelerate.state")
        self.loader = loader
        self.state = getattr(mod, "GradientState", lambda: None)() if mod else None
        loader.end_of_dataloader, loader.remainder = False, -1
        add = getattr(self.state, "_add_dataloader", None)
        if callable(add):
            add(loader)

    def last(self) -> None:
        self.loader.end_of_dataloader = True

    def close(self) -> None:
        remove = getattr(self.state, "_remove_dataloader", None)
        if callable(remove):
            remove(self.loader)
