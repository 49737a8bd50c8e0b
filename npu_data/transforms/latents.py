"""Transforms of a latents store's batches (``npu_data.latents``): the stored flip variant
and caption dropout to the empty prompt's embeddings, drawn per sample like every draw.

A latents batch holds ``latents (B, C, h, w)``, ``latents_flipped``, ``crop_top_left`` and
``crop_top_left_flipped`` (B, 2), ``sizes`` (B, 2) and, with text embeddings,
``prompt_embeds (B, S, D)`` and ``pooled_prompt_embeds (B, P)``. The choices are ``torch.where``
on the batch's device (no host sync, one launch per key).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.transforms.base import Batch, Params, Trait, Transform
from npu_data.transforms.draws import Uniforms


def _probability(p: float, who: str) -> float:
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise UserValueError(f"{who}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask (B,)`` on ``like``'s device, shaped to broadcast over its rows."""
    m = mask.to(like.device, torch.bool, non_blocking=True)
    return m.reshape(-1, *([1] * (like.ndim - 1)))


class RandomLatentFlip(Transform):
    """Each sample's stored mirrored variant with probability ``p``: ``latents`` becomes
    ``latents_flipped`` and ``crop_top_left`` ``crop_top_left_flipped`` (the encode mirrored
    the resized image, then cropped: diffusers' SDXL convention). The ``*_flipped`` keys are
    dropped from the output.

    Args:
        p: The probability, in [0, 1].

    Raises:
        UserError: ``p`` is not a probability; a batch without the flipped variant (a store
            encoded with ``flip=False``).
    """

    traits = frozenset({Trait.LATENTS, Trait.NO_PIXELS})

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability(p, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"flip": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        if "latents_flipped" not in batch:
            raise UserError(f"{self.name}: the batch has no 'latents_flipped' — the store was "
                            "encoded with flip=False; encode it again with flip=True (the "
                            "default), or drop the flip")
        if "crop_top_left_flipped" not in batch or "crop_top_left" not in batch:
            missing = "crop_top_left" if "crop_top_left" not in batch else \
                "crop_top_left_flipped"
            raise UserError(f"{self.name}: the batch has 'latents_flipped' but no {missing!r} — "
                            "a flipped latent needs its own crop corner for SDXL's time ids; "
                            "keep the store's keys together (its reader gives both)")
        out = dict(batch)
        flip = params["flip"]
        lat = batch["latents"]
        out["latents"] = torch.where(_rows(flip, lat), out.pop("latents_flipped"), lat)
        tl = batch["crop_top_left"]
        out["crop_top_left"] = torch.where(_rows(flip, tl), out.pop("crop_top_left_flipped"),
                                           tl)
        return out


class LatentCaptionDropout(Transform):
    """Replace each sample's text embeddings by the empty prompt's with probability ``p``
    (and its ``caption`` by ``""``): ``CaptionDropout`` for a latents store.

    Args:
        p: The probability, in [0, 1].
        empty: The empty prompt's ``(prompt_embeds (S, D), pooled_prompt_embeds (P,))``;
            None (the default): the store's, taken by npu_data's ``DataLoader`` over a
            latents store (``npu_data.latents.empty_prompt(dataset)``).

    Raises:
        UserError: ``p`` is not a probability, ``empty`` is not two tensors, or a batch
            without text embeddings.
    """

    traits = frozenset({Trait.LATENTS, Trait.NO_PIXELS})

    def __init__(self, p: float, empty: tuple[torch.Tensor, torch.Tensor] | None = None
                 ) -> None:
        self.p = _probability(p, self.name)
        self.empty: tuple[torch.Tensor, torch.Tensor] | None = None
        if empty is None:
            return
        if not (isinstance(empty, tuple | list) and len(empty) == 2
                and all(isinstance(t, torch.Tensor) for t in empty)):
            raise UserTypeError(f"{self.name}: empty must be the empty prompt's two tensors — "
                                "pass npu_data.latents.empty_prompt(dataset)")
        self.empty = (empty[0], empty[1])

    def take_empty(self, load: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The empty prompt of the DataLoader's latents store (``load``: read it), unless this
        stage was given one."""
        if self.empty is None:
            self.empty = load()

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"drop": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        if "prompt_embeds" not in batch or "pooled_prompt_embeds" not in batch:
            raise UserError(f"{self.name}: the batch has no prompt embeddings — the store was "
                            "encoded without text encoders; use CaptionDropout on captions")
        if self.empty is None:
            raise UserError(f"{self.name}: no empty prompt — use it in npu_data's DataLoader "
                            "over the latents store (it takes the store's), or pass "
                            "empty=npu_data.latents.empty_prompt(dataset)")
        out = dict(batch)
        drop = params["drop"]
        for key, empty in zip(("prompt_embeds", "pooled_prompt_embeds"), self.empty,
                              strict=True):
            got = batch[key]
            if tuple(empty.shape) != tuple(got.shape[1:]):
                raise UserError(f"{self.name}: the empty prompt's {key} is "
                                f"{tuple(empty.shape)}, the batch's {tuple(got.shape[1:])} — "
                                "take it from the same store (empty_prompt(dataset))")
            e = empty.to(got.device, got.dtype, non_blocking=True)
            out[key] = torch.where(_rows(drop, got), e.unsqueeze(0), got)
        captions = batch.get("caption")
        if isinstance(captions, list):
            dropped = drop.cpu().tolist()  # params are host tensors: no device wait
            out["caption"] = ["" if d else c for c, d in zip(captions, dropped, strict=True)]
        return out


