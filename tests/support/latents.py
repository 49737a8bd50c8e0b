"""The latents tests' encode arguments (the fixtures that use them: tests/latents/conftest.py),
diffusers' prompt encoding as the reference, the example trainer, and a resumed loader."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

BUCKETS = [(64, 64), (48, 80), (80, 48)]  # sides multiples of the VAE's factor 8
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_sdxl_buckets.py"
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


def sdxl_prompt(models: dict[str, Path]) -> Callable[[str], tuple[torch.Tensor, torch.Tensor]]:
    """``sdxl(prompt)``: diffusers' ``encode_prompt`` of one prompt alone (the penultimate
    hidden states of both encoders, concatenated; the second's projected pooled output)."""
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    encoders = [CLIPTextModel.from_pretrained(models["text_encoder"]).eval(),
                CLIPTextModelWithProjection.from_pretrained(models["text_encoder_2"]).eval()]
    toks = [CLIPTokenizer.from_pretrained(models[n]) for n in ("tokenizer", "tokenizer_2")]

    def sdxl(prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = []
        with torch.no_grad():
            for tok, enc in zip(toks, encoders, strict=True):
                ids = tok([prompt], padding="max_length", max_length=tok.model_max_length,
                          truncation=True, return_tensors="pt").input_ids
                out = enc(ids, output_hidden_states=True)
                hidden.append(out.hidden_states[-2][0])
        return torch.cat(hidden, dim=-1), out.text_embeds[0]

    return sdxl


def example_trainer() -> ModuleType:
    """``examples/train_sdxl_buckets.py`` loaded as a module (its ``main(argv)`` trains)."""
    spec = importlib.util.spec_from_file_location("train_sdxl_buckets", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resumed_after_one(make_loader: Callable[[], Any]) -> list[Any]:
    """The batches of a fresh loader resumed from the state another one saved after its
    first batch (a mid-epoch resume)."""
    first = make_loader()
    it = iter(first)
    next(it)
    state = first.state_dict()
    resumed = make_loader()
    resumed.load_state_dict(state)
    return list(resumed)
