"""Tiny random-weight encoders written from configs, offline: a diffusers ``AutoencoderKL``
(4 latent channels, factor 8) and SDXL's pair of text encoders (transformers
``CLIPTextModel`` and ``CLIPTextModelWithProjection``) with ``CLIPTokenizer``s over a
vocabulary of single letters written here. Nothing is downloaded: they try the latents path
(``npu-data encode`` -> a store -> training) end to end in seconds, not a model.

    python -m npu_data.latents.tiny DIR      # DIR/vae, DIR/text_encoder, DIR/tokenizer, ...
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path
from typing import Any

import torch

TOKENS = 12  # the tokenizers' model_max_length
ROLES = ("vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")


def save_tiny_encoders(root: str | Path, seed: int = 0, *, tokens: int = TOKENS,
                       hidden: tuple[int, int] = (16, 24), projection: int = 20
                       ) -> dict[str, Path]:
    """Save the tiny encoders under ``root`` (weights from ``torch.manual_seed(seed)``);
    their folders by role (``vae``, ``text_encoder``, ``text_encoder_2``, ``tokenizer``,
    ``tokenizer_2``), each loadable with ``from_pretrained(..., local_files_only=True)``.
    ``tokens``, ``hidden`` (each text encoder's width) and ``projection`` (the pooled width)
    set the embeddings' shapes: ``tokens=77, hidden=(768, 1280), projection=1280`` gives
    SDXL's (77 x 2048, pooled 1280) from two layers each."""
    from diffusers import AutoencoderKL
    from transformers import (
        CLIPTextConfig,
        CLIPTextModel,
        CLIPTextModelWithProjection,
        CLIPTokenizer,
    )

    root = Path(root)
    torch.manual_seed(seed)
    vae: Any = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                             down_block_types=("DownEncoderBlock2D",) * 4,
                             up_block_types=("UpDecoderBlock2D",) * 4,
                             block_out_channels=(8, 8, 8, 8), layers_per_block=1,
                             norm_num_groups=4)
    vae.save_pretrained(root / "vae")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (root / "bpe").mkdir(parents=True, exist_ok=True)
    (root / "bpe" / "vocab.json").write_text(json.dumps(vocab))
    (root / "bpe" / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(root / "bpe" / "vocab.json"), str(root / "bpe" / "merges.txt"),
                        model_max_length=tokens)
    for name, cls, width in (("text_encoder", CLIPTextModel, hidden[0]),
                             ("text_encoder_2", CLIPTextModelWithProjection, hidden[1])):
        cfg = CLIPTextConfig(vocab_size=len(vocab), hidden_size=width, intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=2,
                             max_position_embeddings=tokens, projection_dim=projection,
                             bos_token_id=0, eos_token_id=1, pad_token_id=1)
        cls(cfg).save_pretrained(root / name)
        tok.save_pretrained(root / name.replace("text_encoder", "tokenizer"))
    return {n: root / n for n in ROLES}


def main(argv: list[str] | None = None) -> int:
    """``python -m npu_data.latents.tiny DIR``: write them, print the encode flags."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m npu_data.latents.tiny DIR", file=sys.stderr)
        return 2
    from npu_data.progress import foreign_bars_off

    with foreign_bars_off():
        paths = save_tiny_encoders(args[0])
    print(" ".join(f"--{role.replace('_', '-')} {paths[role]}" for role in ROLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
