"""Loaders: distributed sampler, padded collate, device-feeding DataLoader, datasets."""

from __future__ import annotations

from typing import Any

from npu_data.loaders.assemble import collate_samples
from npu_data.loaders.bucket_sampler import BucketBatchSampler
from npu_data.loaders.dataloader import DataLoader
from npu_data.loaders.sampler import NpuDistributedSampler

__all__ = ["BucketBatchSampler", "DataLoader", "LabelStudioDataset", "NpuDistributedSampler",
           "collate_samples"]


def __getattr__(name: str) -> Any:
    if name == "LabelStudioDataset":  # imports the shard reader/writer only when used
        from npu_data.loaders.datasets import LabelStudioDataset

        return LabelStudioDataset
    raise AttributeError(f"module 'npu_data.loaders' has no attribute {name!r}")
