"""Feeding a latents store to training: its empty-prompt embeddings (for caption dropout)
and the check that a store was made as a run expects (``check_store``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from npu_data.errors import UserError
from npu_data.shards.latent_format import DTYPES
from npu_data.shards.latent_read import empty_prompt, latent_record

__all__ = ["check_store", "empty_prompt"]


def check_store(ds: Any, *, buckets: Sequence[Sequence[int]] | None = None,
                dtype: torch.dtype | None = None, flip: bool | None = None,
                text: bool | None = None, vae_config: str | None = None) -> None:
    """A one-line ``UserError`` when latents store ``ds`` was not made as a run expects:
    other ``buckets``, storage ``dtype``, no flipped variant, no text embeddings, or another
    VAE (``vae_config``: its config's sha256, ``models.config_sha256``). None: not checked."""
    record = latent_record(ds)
    where = os.fspath(ds.path)
    fix = "encode it again with the run's settings (npu-data encode), or change the run"
    if buckets is not None and [list(map(int, b)) for b in buckets] != record["buckets"]:
        raise UserError(f"{where}: encoded for buckets {record['buckets']}, the run uses "
                        f"{[list(map(int, b)) for b in buckets]} — {fix}")
    if dtype is not None and DTYPES[record["dtype"]][1] != dtype:
        raise UserError(f"{where}: stores {record['dtype']}, the run expects {dtype} — {fix}")
    if flip and not record["flip"]:
        raise UserError(f"{where}: stored without flipped latents, the run flips — {fix}")
    if text and not record.get("text"):
        raise UserError(f"{where}: stored without text embeddings, the run needs them — {fix}")
    if vae_config is not None and record["encoders"]["vae"]["config_sha256"] != vae_config:
        raise UserError(f"{where}: encoded with another VAE (config sha256 "
                        f"{record['encoders']['vae']['config_sha256'][:12]}..., the run's "
                        f"{vae_config[:12]}...) — {fix}")
