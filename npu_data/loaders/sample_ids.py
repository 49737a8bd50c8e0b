"""The ids a batch's per-sample augmentation is keyed with (DataLoader and stream crops)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from npu_data.transforms import draws


def sample_ids(batch: Mapping[str, Any]) -> np.ndarray | None:
    """The batch's sample ids: its ``index`` column, else hashes of its ``__key__`` strings."""
    index = batch.get("index")
    if isinstance(index, torch.Tensor) and index.ndim == 1 and not index.is_floating_point():
        return index.numpy().astype(np.int64)
    names = batch.get("__key__")
    if isinstance(names, (list, tuple)) and names and all(isinstance(k, str) for k in names):
        return draws.string_ids(list(names))
    return None
