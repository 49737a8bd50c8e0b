"""The DataLoader rows of ``npu_data.parity.check_all`` (``npu-data parity --transform``): a
user's transform in its pipeline (``check.pipeline_for``) through the DataLoader over a
``ShardDataset``, keyed by (seed, epoch, index).

- ``loader, crop at read`` / ``loader, after read``: the reader applies the leading crop
  while reading (``read_crop=True``), or the pipeline runs whole after the read; each
  sample against the pipeline's reference replayed from ``batch["aug"]`` on the stored
  image.
- ``geometry``: every other tensor of the batch (boxes, keypoints, masks, sizes, the
  micro-conditioning) alike at read and after read; for a transform that moves no pixels
  (``Trait.PER_PIXEL`` / ``NO_PIXELS``) its geometry keys also alike with a stage that
  does nothing in its place (the same draws: the same positions).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms.base import Batch, Params, Trait, Transform
from npu_data.transforms.oracle.measures import ParityRow, RowAccumulator
from npu_data.transforms.oracle.replay import sample_image

__all__ = ["Still", "loader_rows"]

_NOT_COMPARED = ("image", "aug")  # the pixels have their rows; the parameters are the draws


class Still(Transform):
    """A stage that moves nothing: what a transform that moves no pixels is compared with."""

    traits = frozenset({Trait.NO_PIXELS})

    def make_params(self, sizes: np.ndarray, rng: Any) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        return batch


def loader_rows(transform: Transform, pipeline: Transform, still: Transform | None,
                dataset: Any, *, seed: int, batch_size: int, device: torch.device,
                tolerance: tuple[float, float]) -> list[ParityRow]:
    """The three loader rows (module doc) of ``transform`` in ``pipeline`` over ``dataset``;
    ``still``: that pipeline with a :class:`Still` in its place, for a transform that moves
    no pixels (else None)."""
    name = repr(transform)
    if not transform.keyed:
        raise UserValueError(f"{name} draws no keyed parameters (a stage without "
                             "make_params): a pipeline holding it draws from a generator, and "
                             "the DataLoader cannot crop at read ahead of it — "
                             "a deterministic transform returns {} from make_params "
                             "(docs/architecture.md, \"Writing a transform\")")
    at_read = _batches(pipeline, dataset, seed, batch_size, device, True)
    after = _batches(pipeline, dataset, seed, batch_size, device, False)
    rows = []
    for label, batches in (("loader, crop at read", at_read), ("loader, after read", after)):
        acc = RowAccumulator(f"{name} {label}", tolerance)
        for batch in batches:
            for j, i in enumerate(batch["index"].tolist()):
                ref = pipeline.reference(np.asarray(dataset[i]["image"]), batch["aug"], j)
                acc.add(ref, sample_image(batch, j))
        rows.append(acc.row())
    geometry = RowAccumulator(f"{name} geometry", (0.0, 0.0))
    for a, b in zip(at_read, after, strict=True):
        _add_keys(geometry, b, a, lambda key: key not in _NOT_COMPARED)
    if still is not None:
        unmoved = _batches(still, dataset, seed, batch_size, device, True)
        for a, b in zip(at_read, unmoved, strict=True):
            _add_keys(geometry, b, a, lambda key: "." in key and key.split(".")[0] != "aug")
    rows.append(geometry.row())
    return rows


def _batches(pipeline: Transform, dataset: Any, seed: int, batch_size: int,
             device: torch.device, read_crop: bool) -> list[Batch]:
    """Two epochs of ``pipeline`` through the DataLoader (new draws in the second)."""
    from npu_data.loaders import DataLoader

    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=seed,
                        device=device, transform=pipeline, read_crop=read_crop)
    return [dict(batch) for _ in range(2) for batch in loader]


def _add_keys(acc: RowAccumulator, expected: Batch, got: Batch, compared: Any) -> None:
    """One comparison per tensor key ``compared`` accepts (NaN equal to NaN; a key missing
    on one side, or of another shape, counts as an infinite difference)."""
    for key in sorted(set(expected) | set(got)):
        e, g = expected.get(key), got.get(key)
        if not compared(key) or not (isinstance(e, torch.Tensor) or isinstance(g, torch.Tensor)):
            continue
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)) or \
                e.shape != g.shape:
            acc.add(np.zeros(1), np.full(1, np.inf))
            continue
        acc.add(_numbers(e), _numbers(g))


def _numbers(t: torch.Tensor) -> np.ndarray:
    return np.nan_to_num(t.detach().cpu().to(torch.float64).numpy(), nan=0.0, posinf=1e30,
                         neginf=-1e30)
