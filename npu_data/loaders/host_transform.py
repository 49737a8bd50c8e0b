"""A dataset's ``transform=`` outside npu_data's DataLoader: applied on the host.

``LabelStudioDataset(json_file, transform=NpuPreprocessor(...))`` is meant for npu_data's
DataLoader, which batches the transform on the device. Torch's own ``DataLoader`` (the
article's code) reads ``dataset.__getitems__(indices)`` (or ``dataset[i]``) in its workers
and stacks what comes back with ``default_collate``; there the dataset applies the
transform itself, on the host CPU — the same Pillow-exact kernels, one call per batch of
samples — and returns the batch's rows (``_Row``), which torch's collate puts back
together into exactly the batch npu_data's loader would have made (padded geometry with
``valid`` masks, ``sizes``, ``aug``; registered in torch's ``default_collate_fn_map``, the
documented way to extend ``default_collate``). ``dataset[i]`` is one sample, transformed,
without padding. Random parameters are keyed per sample by a seed drawn from torch's random
state: new each epoch in torch's workers, reproducible under ``torch.manual_seed``, as any
torch transform. The first such call says once which loader batches it on the device.

npu_data's DataLoader reads raw samples: it asks the dataset for ``BatchRequest``s
(``loaders.request``), torch's loader for plain indices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

from npu_data.loaders.epochs import warn_once
from npu_data.transforms.pipeline import Pipeline


def transformed(transform: Any, samples: Any, owner: str) -> dict[str, Any]:
    """``samples`` (sample dicts or a lazy ``HostBatch``) collated and transformed on the host."""
    from npu_data.loaders.assemble import collate_samples

    info = get_worker_info()
    if info is None or info.id == 0:
        warn_once(f"{owner}: transform= applied on the host CPU, per batch of torch's "
                  "DataLoader (exact, slower); npu_data.DataLoader batches it on the device "
                  "(from npu_data import DataLoader)")
    batch = collate_samples(samples)
    seed = int(torch.randint(0, 1 << 62, (1,)).item())  # torch's random state, as torch's
    pipeline = Pipeline.of(transform)
    request = pipeline.draw_for(batch, seed, 0) if pipeline is not None else None
    if pipeline is not None and request is not None:
        out = pipeline.finish(batch, request, cropped=False)
        out["aug"] = {k: torch.from_numpy(v) for k, v in (request.params or {}).items()}
        return out
    generator = torch.Generator()
    generator.manual_seed(seed)
    return dict(transform(batch, generator=generator))


def _row(value: Any, j: int, n: int) -> Any:
    if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == n:
        return value[j]
    if isinstance(value, Mapping):
        return {k: _row(v, j, n) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and len(value) == n:
        return value[j]
    return value


class _Row(dict):  # type: ignore[type-arg]
    """Row ``row`` of a transformed ``batch``: a sample dict in the batch's layout that
    torch's ``default_collate`` recognises (a sample, not a batch type): the rows of one
    batch, in order, collate back into that batch."""

    def __init__(self, batch: dict[str, Any], row: int, n: int) -> None:
        super().__init__({k: _row(v, row, n) for k, v in batch.items()})
        self.batch, self.row = batch, row


def rows(batch: dict[str, Any]) -> list[_Row]:
    """The rows of a transformed batch (what ``__getitems__`` hands torch's collate)."""
    n = len(batch["image"])
    return [_Row(batch, j, n) for j in range(n)]


def sample(batch: dict[str, Any]) -> dict[str, Any]:
    """The one sample of a one-sample transformed batch."""
    return {k: _row(v, 0, 1) for k, v in batch.items()}


def _collate_rows(found: list[_Row], *, collate_fn_map: Any = None) -> Any:
    first = found[0]
    whole = first.batch
    if len(found) == len(whole["image"]) and all(
            r.batch is whole and r.row == j for j, r in enumerate(found)):
        return whole  # the rows of one batch: that batch, no copy
    return default_collate([dict(r) for r in found])


__all__ = ["rows", "sample", "transformed"]

try:  # torch's documented extension point of default_collate (torch >= 1.13)
    from torch.utils.data._utils.collate import default_collate_fn_map

    default_collate_fn_map[_Row] = _collate_rows
except ImportError:  # pragma: no cover - rows then collate as plain dicts
    pass
