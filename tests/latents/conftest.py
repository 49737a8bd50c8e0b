"""Tiny random-weight encoders built from configs into a temporary folder (a diffusers
AutoencoderKL; transformers CLIPTextModel and CLIPTextModelWithProjection with a vocabulary
of single letters written here), a small image dataset, and its float32 latents store."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest
import torch

from npu_data.shards.importer import import_dataset
from npu_data.tools.sample_data import make_sample_project

BUCKETS = [(64, 64), (48, 80), (80, 48)]  # sides multiples of the VAE's factor 8
TOKENS = 12  # the tokenizers' model_max_length


def build_models(root: Path) -> dict[str, Path]:
    """Save the tiny encoders under ``root``; their folders by role."""
    from diffusers import AutoencoderKL
    from transformers import (
        CLIPTextConfig,
        CLIPTextModel,
        CLIPTextModelWithProjection,
        CLIPTokenizer,
    )

    torch.manual_seed(0)
    AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                  down_block_types=("DownEncoderBlock2D",) * 4,
                  up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8),
                  layers_per_block=1, norm_num_groups=4).save_pretrained(root / "vae")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (root / "bpe").mkdir(parents=True)
    (root / "bpe" / "vocab.json").write_text(json.dumps(vocab))
    (root / "bpe" / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(root / "bpe" / "vocab.json"), str(root / "bpe" / "merges.txt"),
                        model_max_length=TOKENS)
    for name, cls, hidden in (("text_encoder", CLIPTextModel, 16),
                              ("text_encoder_2", CLIPTextModelWithProjection, 24)):
        cfg = CLIPTextConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=2,
                             max_position_embeddings=TOKENS, projection_dim=20,
                             bos_token_id=0, eos_token_id=1, pad_token_id=1)
        cls(cfg).save_pretrained(root / name)
        tok.save_pretrained(root / name.replace("text_encoder", "tokenizer"))
    return {n: root / n for n in ("vae", "text_encoder", "text_encoder_2", "tokenizer",
                                  "tokenizer_2")}


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def pixels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 photos (every sixth portrait) with captions, in shards of 4."""
    root = tmp_path_factory.mktemp("pixels")
    project = make_sample_project(root / "project", n_images=10, width=96, height=64)
    import_dataset(project.export_path, root / "shards", shard_size=4)
    return root / "shards"


def encode_kwargs(models: dict[str, Path], **over: Any) -> dict[str, Any]:
    """``encode_latents`` keywords of the tests' store (float32, CPU, both text encoders)."""
    kw: dict[str, Any] = dict(buckets=BUCKETS, batch_size=3, device="cpu",
                              dtype=torch.float32, shard_size=4,
                              text_encoders=[models["text_encoder"], models["text_encoder_2"]],
                              tokenizers=[models["tokenizer"], models["tokenizer_2"]])
    kw.update(over)
    return kw


@pytest.fixture(scope="session")
def store(models: dict[str, Path], pixels: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Path:
    from npu_data.latents import encode_latents

    out = tmp_path_factory.mktemp("store") / "latents"
    encode_latents(pixels, out, models["vae"], **encode_kwargs(models))
    return out
