"""npu-data: Label Studio annotations to memory-mapped shards and on-device augmentation.

The names users type are importable from the top level; they load on first use so that
``import npu_data`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "DataLoader": "npu_data.loaders",
    "NpuDistributedSampler": "npu_data.loaders",
    "BucketBatchSampler": "npu_data.loaders",
    "LabelStudioDataset": "npu_data.loaders",
    "collate_samples": "npu_data.loaders",
    "ShardDataset": "npu_data.shards.reader",
    "NpuPreprocessor": "npu_data.transforms",
    "Compose": "npu_data.transforms",
    "RandomResizedCrop": "npu_data.transforms",
    "ColorJitter": "npu_data.transforms",
    "RandomHorizontalFlip": "npu_data.transforms",
    "Normalize": "npu_data.transforms",
    "ResizeCrop": "npu_data.transforms",
    "CaptionDropout": "npu_data.transforms",
    "RandomCaption": "npu_data.transforms",
    "compare_tensor": "npu_data.transforms.parity",
    "parse_export": "npu_data.annotations",
    "resolve_device": "npu_data.device",
    "UserError": "npu_data.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'npu_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
