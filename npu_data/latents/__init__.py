"""Frozen encoders run once: VAE latents and text embeddings precomputed into a latents
store (docs/format.md, "Latents stores"), read back by ``ShardDataset`` and fed by
``BucketBatchSampler`` and the ``DataLoader`` like pixels."""

from __future__ import annotations

from npu_data.latents.encode import encode_latents
from npu_data.latents.feed import check_store, empty_prompt

__all__ = ["check_store", "empty_prompt", "encode_latents"]
