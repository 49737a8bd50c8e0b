"""The frozen models of an encode: loaded from local folders or taken as given, moved to the
device, recorded by config sha256, and run as SDXL's trainers run them (the VAE's
``latent_dist.mean * scaling_factor``; both text encoders' penultimate hidden states and the
last one's pooled output)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from npu_data.common.oserrors import os_error
from npu_data.common.paths import open_regular
from npu_data.errors import UserError, UserTypeError, UserValueError

CROP_RULE = ("ResizeCrop: resize to cover the bucket (Pillow BILINEAR, antialiased), centre "
             "crop at round((full - target) / 2) (halves to even); flipped: the resized image "
             "mirrored, then cropped at the same offset (diffusers' SDXL trainer)")


@dataclass
class Models:
    """The frozen models of an encode, on their device."""

    vae: Any
    text_encoders: list[Any]
    tokenizers: list[Any]
    device: torch.device


def config_sha256(model: Any) -> str:
    """sha256 of a model's config (diffusers ``config``, transformers ``config.to_dict()``),
    or of a tokenizer's vocabulary and length: what the manifest records of each encoder."""
    cfg = getattr(model, "config", None)
    if cfg is not None:
        data = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
        data = {k: v for k, v in data.items() if not k.startswith("_")
                and k not in ("transformers_version", "torch_dtype", "dtype")}
    else:  # a tokenizer
        data = {"vocab": sorted(model.get_vocab().items()),
                "model_max_length": int(model.model_max_length)}
    blob = json.dumps({"class": type(model).__name__, "config": data}, sort_keys=True,
                      default=str).encode()
    return hashlib.sha256(blob).hexdigest()


# the VAE config values an encode reads: each an int in its range (or a list of them)
_VAE_INTS = {"latent_channels": (1, 1024), "in_channels": (1, 64), "out_channels": (1, 64),
             "layers_per_block": (1, 64), "norm_num_groups": (1, 1024),
             "sample_size": (1, 1 << 15)}
_VAE_LISTS = {"block_out_channels": (1, 1 << 16, 8)}  # (low, high, most entries)


def _int_in(v: Any, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def check_vae_config(cfg: Any, where: str) -> None:
    """The VAE config values an encode uses, each of its type and in range (``UserError``
    naming ``where``, the key and the value): a string where a number goes, an absurd
    ``sample_size``, a ``scaling_factor`` that is NaN, infinite or not positive."""
    def get(key: str, default: Any = None) -> Any:
        return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)

    for key, (low, high) in _VAE_INTS.items():
        v = get(key, None)
        if v is None:
            continue
        vals = v if key == "sample_size" and isinstance(v, (list, tuple)) and v else [v]
        if not all(_int_in(x, low, high) for x in vals):
            raise UserValueError(f"{where}: config {key} must be an integer from {low} to "
                                 f"{high}, got {str(v)[:60]!r} — fix the VAE's config.json")
    for key, (low, high, most) in _VAE_LISTS.items():
        v = get(key, None)
        if v is not None and not (isinstance(v, (list, tuple)) and 1 <= len(v) <= most
                                  and all(_int_in(x, low, high) for x in v)):
            raise UserValueError(f"{where}: config {key} must be 1 to {most} integers from "
                                 f"{low} to {high}, got {str(v)[:60]!r} — fix the VAE's "
                                 "config.json")
    for key, positive in (("scaling_factor", True), ("shift_factor", False)):
        v = get(key, None)
        if v is None and not positive:
            continue
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (positive and not float(v) > 0):
            raise UserValueError(f"{where}: config {key} must be a finite number"
                                 f"{' > 0' if positive else ''}, got {str(v)[:60]!r} — the "
                                 "latents would be NaN, infinite or 0; fix the VAE's config")


def _vae_config_file(folder: Path) -> None:
    """A VAE folder's ``config.json`` checked before the model is built from it."""
    path = folder / "config.json"
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return  # from_pretrained says what is missing
    except OSError as exc:
        raise os_error(exc, path) from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_CONFIG + 1)
    if len(raw) > MAX_CONFIG:
        raise UserValueError(f"{path}: larger than {MAX_CONFIG} bytes — not a VAE config")
    try:
        cfg = json.loads(raw)
    except ValueError:
        raise UserValueError(f"{path}: not JSON — give the folder saved with "
                             "AutoencoderKL.save_pretrained") from None
    if not isinstance(cfg, dict):
        raise UserValueError(f"{path}: not a JSON object — not a VAE config")
    check_vae_config(cfg, str(path))


MAX_CONFIG = 1 << 20  # a model config's bytes


def _load(spec: Any, loader: str, what: str) -> Any:
    """``spec`` itself, or loaded from a local folder with ``loader`` (``module:Class``)."""
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    folder = Path(spec)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such {what} folder — give the folder saved with "
                        "save_pretrained (local files only), or the loaded model")
    if what == "VAE":
        _vae_config_file(folder)
    module, cls = loader.split(":")
    klass = getattr(__import__(module, fromlist=[cls]), cls)
    try:
        return klass.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{folder}: cannot load the {what} ({' '.join(str(exc).split())[:200]})"
                        f" — give a folder saved with {cls}.save_pretrained") from None


def load_models(vae: Any, text_encoders: Sequence[Any] | None,
                tokenizers: Sequence[Any] | None, device: torch.device) -> Models:
    """The VAE and text encoders (models or local folders), frozen, in eval mode, moved to
    ``device`` (a model passed in is moved itself); a one-line UserError for a folder that
    does not load or a count mismatch."""
    encoders = list(text_encoders or [])
    toks = list(tokenizers or [])
    if len(encoders) != len(toks):
        raise UserValueError(f"{{text_encoders}} ({len(encoders)}) and {{tokenizers}} "
                             f"({len(toks)}) must pair up: one tokenizer per text encoder",
                             option=("text_encoders", "tokenizers"))
    if len(encoders) > 2:
        raise UserValueError(f"{{text_encoders}}: SDXL has one or two, got {len(encoders)}",
                             option="text_encoders")
    v = _load(vae, "diffusers:AutoencoderKL", "VAE")
    if not hasattr(v, "encode") or not hasattr(getattr(v, "config", None), "latent_channels"):
        raise UserTypeError(f"{{vae}}: {type(v).__name__} is not a diffusers AutoencoderKL — "
                            "pass one, or the folder it was saved to", option="vae")
    check_vae_config(v.config, f"VAE {vae}" if isinstance(vae, (str, os.PathLike))
                     else f"VAE {type(v).__name__}")
    classes = ["transformers:CLIPTextModel", "transformers:CLIPTextModelWithProjection"]
    loaded = [_load(e, classes[min(i, 1)] if len(encoders) == 2 else classes[0],
                    f"text encoder {i + 1}") for i, e in enumerate(encoders)]
    loaded_toks = [_load(t, "transformers:CLIPTokenizer", f"tokenizer {i + 1}")
                   for i, t in enumerate(toks)]
    for m in (v, *loaded):
        m.requires_grad_(False)
        m.eval()
        m.to(device)
    return Models(v, loaded, loaded_toks, device)


def factor_of(vae: Any) -> int:
    """The VAE's downsampling factor: 2 per down block after the first."""
    return 2 ** (len(vae.config.block_out_channels) - 1)


@torch.no_grad()
def encode_pixels(vae: Any, images: torch.Tensor, keys: np.ndarray | None = None
                  ) -> torch.Tensor:
    """``latent_dist.mean * scaling_factor`` of [-1, 1] float images (B, 3, H, W); with
    ``keys`` ((B,) uint64, one per sample) a draw ``mean + std * eps`` instead, each sample's
    ``eps`` from a CPU generator seeded with its key (the same draw whatever the batch, rank
    or device)."""
    param = next(vae.parameters())
    x = images.to(param.device, param.dtype)
    dist = vae.encode(x).latent_dist
    if keys is None:
        return dist.mean * vae.config.scaling_factor
    shape = tuple(dist.mean.shape[1:])
    eps = torch.stack([torch.randn(shape, generator=torch.Generator().manual_seed(int(k)))
                       for k in keys]).to(dist.mean.device, dist.mean.dtype, non_blocking=True)
    return (dist.mean + dist.std * eps) * vae.config.scaling_factor


@torch.no_grad()
def encode_prompts(models: Models, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """SDXL's ``(prompt_embeds (B, S, sum D), pooled (B, P))`` of ``captions``: each encoder's
    penultimate hidden state concatenated; the last encoder's projected (or pooled) output."""
    hidden, pooled = [], None
    for tok, enc in zip(models.tokenizers, models.text_encoders, strict=True):
        ids = tok(captions, padding="max_length", max_length=tok.model_max_length,
                  truncation=True, return_tensors="pt").input_ids.to(models.device)
        out = enc(ids, output_hidden_states=True)
        hidden.append(out.hidden_states[-2])
        pooled = out.text_embeds if getattr(out, "text_embeds", None) is not None \
            else out.pooler_output
    assert pooled is not None
    return torch.cat(hidden, dim=-1), pooled


def encoder_record(models: Models, dtype_name_: str, flip: bool,
                   buckets: Sequence[tuple[int, int]], factor: int,
                   latent: str = "mean", seed: int = 0) -> dict[str, Any]:
    """The manifest's ``latents`` record (less ``empty_prompt``): the layout, the crop rule
    and each model's class and config sha256."""
    vae = models.vae
    encoders: dict[str, Any] = {"vae": {"class": type(vae).__name__,
                                        "config_sha256": config_sha256(vae)}}
    for i, (e, t) in enumerate(zip(models.text_encoders, models.tokenizers, strict=True)):
        suffix = "" if i == 0 else f"_{i + 1}"
        encoders[f"text_encoder{suffix}"] = {"class": type(e).__name__,
                                             "config_sha256": config_sha256(e)}
        encoders[f"tokenizer{suffix}"] = {"class": type(t).__name__,
                                          "config_sha256": config_sha256(t)}
    text = None
    if models.text_encoders:  # the shapes, from the empty prompt
        embeds, pooled = encode_prompts(models, [""])
        text = {"tokens": int(embeds.shape[1]), "dim": int(embeds.shape[2]),
                "pooled": int(pooled.shape[1])}
    return {"channels": int(vae.config.latent_channels), "factor": factor,
            "dtype": dtype_name_, "flip": flip, "latent": latent,
            "scaling_factor": float(vae.config.scaling_factor),
            "buckets": [list(b) for b in buckets], "crop": CROP_RULE, "text": text,
            "encoders": encoders, **({"seed": seed} if latent == "sample" else {})}
