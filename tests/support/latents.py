"""The latents tests' encode arguments (the fixtures that use them: tests/latents/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

BUCKETS = [(64, 64), (48, 80), (80, 48)]  # sides multiples of the VAE's factor 8
DESCRIBED = [(128, 192), (192, 128), (96, 96), (256, 256)]  # (height, width) of each photo


def encode_kwargs(models: dict[str, Path], **over: Any) -> dict[str, Any]:
    """``encode_latents`` keywords of the tests' store (float32, CPU, both text encoders)."""
    kw: dict[str, Any] = dict(buckets=BUCKETS, batch_size=3, device="cpu",
                              dtype=torch.float32, shard_size=4,
                              text_encoders=[models["text_encoder"], models["text_encoder_2"]],
                              tokenizers=[models["tokenizer"], models["tokenizer_2"]])
    kw.update(over)
    return kw


def encode_args(dataset: Path, models: dict[str, Path], out: Path) -> list[str]:
    """``npu-data encode`` of ``dataset`` with both tiny text encoders, float32, no flip."""
    return ["encode", str(dataset), "--vae", str(models["vae"]), "--out", str(out),
            "--device", "cpu", "--dtype", "float32", "--no-flip", "--batch-size", "4",
            "--text-encoder", str(models["text_encoder"]), "--tokenizer",
            str(models["tokenizer"]), "--text-encoder-2", str(models["text_encoder_2"]),
            "--tokenizer-2", str(models["tokenizer_2"])]
