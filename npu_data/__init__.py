"""npu-data: Label Studio annotations to memory-mapped shards and on-device augmentation.

The names users type are importable from the top level; they load on first use so that
``import npu_data`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and the API reference see: the names of _LAZY
    from npu_data.annotations import parse_export as parse_export
    from npu_data.buckets import Buckets as Buckets
    from npu_data.buckets import buckets_of as buckets_of
    from npu_data.buckets import make_buckets as make_buckets
    from npu_data.device import resolve_device as resolve_device
    from npu_data.errors import UserError as UserError
    from npu_data.latents import encode_latents as encode_latents
    from npu_data.loaders import BucketBatchSampler as BucketBatchSampler
    from npu_data.loaders import DataLoader as DataLoader
    from npu_data.loaders import NpuDistributedSampler as NpuDistributedSampler
    from npu_data.loaders import collate_samples as collate_samples
    from npu_data.loaders.datasets import LabelStudioDataset as LabelStudioDataset
    from npu_data.shards.reader import ShardDataset as ShardDataset
    from npu_data.transforms import CaptionDropout as CaptionDropout
    from npu_data.transforms import ColorJitter as ColorJitter
    from npu_data.transforms import Compose as Compose
    from npu_data.transforms import Normalize as Normalize
    from npu_data.transforms import NpuPreprocessor as NpuPreprocessor
    from npu_data.transforms import RandomAffine as RandomAffine
    from npu_data.transforms import RandomCaption as RandomCaption
    from npu_data.transforms import RandomHorizontalFlip as RandomHorizontalFlip
    from npu_data.transforms import RandomIoUCrop as RandomIoUCrop
    from npu_data.transforms import RandomResizedCrop as RandomResizedCrop
    from npu_data.transforms import RandomRotation as RandomRotation
    from npu_data.transforms import RandomVerticalFlip as RandomVerticalFlip
    from npu_data.transforms import RandomZoomOut as RandomZoomOut
    from npu_data.transforms import ResizeCrop as ResizeCrop
    from npu_data.transforms import ScaleJitter as ScaleJitter
    from npu_data.transforms.oracle.measures import compare_tensor as compare_tensor

_LAZY = {
    "DataLoader": "npu_data.loaders",
    "NpuDistributedSampler": "npu_data.loaders",
    "BucketBatchSampler": "npu_data.loaders",
    "Buckets": "npu_data.buckets",
    "buckets_of": "npu_data.buckets",
    "make_buckets": "npu_data.buckets",
    "LabelStudioDataset": "npu_data.loaders",
    "collate_samples": "npu_data.loaders",
    "ShardDataset": "npu_data.shards.reader",
    "NpuPreprocessor": "npu_data.transforms",
    "Compose": "npu_data.transforms",
    "RandomResizedCrop": "npu_data.transforms",
    "ColorJitter": "npu_data.transforms",
    "RandomHorizontalFlip": "npu_data.transforms",
    "RandomVerticalFlip": "npu_data.transforms",
    "RandomAffine": "npu_data.transforms",
    "RandomRotation": "npu_data.transforms",
    "RandomZoomOut": "npu_data.transforms",
    "RandomIoUCrop": "npu_data.transforms",
    "ScaleJitter": "npu_data.transforms",
    "Normalize": "npu_data.transforms",
    "ResizeCrop": "npu_data.transforms",
    "CaptionDropout": "npu_data.transforms",
    "RandomCaption": "npu_data.transforms",
    "compare_tensor": "npu_data.transforms.oracle.measures",
    "parse_export": "npu_data.annotations",
    "resolve_device": "npu_data.device",
    "UserError": "npu_data.errors",
    "encode_latents": "npu_data.latents",
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
