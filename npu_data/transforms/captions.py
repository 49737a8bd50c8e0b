"""Captions for text-to-image training: one of several per sample, dropped for CFG.

``batch["caption"]`` is a list of strings (a sample's first text); the batch also carries
every text of a sample (``texts.text``, with ``texts.control``) and its chosen labels
(``choices.label``, ``choices.control``). Both transforms draw on the host, keyed by
(seed, epoch, sample) like every other draw; they leave the pixels alone and may sit
anywhere in a pipeline (after ``Normalize`` too).

Over a latents store's batches (``npu-data encode``: one embedding row per caption) a
sample's ``caption`` and ``prompt_embeds`` are its first caption's; ``RandomCaption`` picks
one of its stored captions with the same formula (``min(int(u * n), n - 1)``) and swaps in
that row's embeddings, so one pipeline trains the same caption from pixels or from the store
(docs/format.md, "Latents stores").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserError, UserValueError
from npu_data.transforms.base import Batch, Params, Trait, Transform
from npu_data.transforms.draws import Uniforms

SOURCES = ("texts.text", "choices.label")  # the batch keys a caption may come from


def _host_list(values: Any, b: int) -> list[Any]:
    return values.tolist() if isinstance(values, torch.Tensor) else [values] * b


class CaptionDropout(Transform):
    """Replace each sample's ``caption`` with ``""`` with probability ``p`` (classifier-free
    guidance training drops about 5-10%).

    Args:
        p: the probability, in [0, 1].
        key: the batch key of the captions (a list of strings).

    Raises:
        UserError: ``p`` is not a probability.
    """

    traits = frozenset({Trait.NO_PIXELS, Trait.LATENTS})  # captions only: latents batches too
    reads_captions = True  # the DataLoader refuses a dataset without any (caption_check)

    def __init__(self, p: float = 0.1, key: str = "caption") -> None:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)
        self.key = key

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"drop": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        captions = batch.get(self.key)
        if not isinstance(captions, list):
            raise UserError(f"{self.name}: the batch has no list of captions at {self.key!r} "
                            "— the loaders' batches carry 'caption'; pass key= otherwise")
        drop = _host_list(params["drop"], len(captions))
        out = dict(batch)
        out[self.key] = ["" if d else c for c, d in zip(captions, drop, strict=True)]
        return out


class RandomCaption(Transform):
    """Pick each sample's ``caption`` uniformly among its texts or chosen labels.

    Args:
        source: ``"texts.text"`` (``textarea`` strings: a textarea with several values
            gives several) or ``"choices.label"`` (the names of the chosen labels).
        control: only the texts/choices of this control (tag name in the labeling config);
            None: all of the sample's.
        dataset: the dataset the batches come from (its ``controls`` and ``labels`` name
            the controls and label ids); needed for ``control`` or ``"choices.label"``.
        key: the batch key the chosen caption is written to.

    Raises:
        UserError: an unknown ``source``; ``control`` or ``"choices.label"`` without a
            ``dataset`` that names the controls, or a ``control`` it does not have.

    A sample with nothing to choose from keeps its caption. On a latents store's batch it
    chooses among the sample's stored captions (``source`` the default, no ``control``),
    reading the chosen rows from the store: ``dataset=`` it, or let npu_data's DataLoader
    over the store bind it.
    """

    traits = frozenset({Trait.NO_PIXELS, Trait.LATENTS})  # a latents store's: its captions
    reads_captions = True  # the DataLoader refuses a dataset without any (caption_check)

    def __init__(self, source: str = "texts.text", control: str | None = None,
                 dataset: Any = None, key: str = "caption") -> None:
        if source not in SOURCES:
            raise UserValueError(f"{self.name}: source must be one of {SOURCES}, got {source!r}")
        self.source, self.control, self.key = source, control, key
        controls: Sequence[str] = getattr(dataset, "controls", None) or []
        labels: dict[str, list[str]] = getattr(dataset, "labels", None) or {}
        if (control is not None or source == SOURCES[1]) and not controls:
            raise UserValueError(
                f"{self.name}: pass dataset= (a ShardDataset / LabelStudioDataset) "
                "to name controls and choices"
            )
        if control is not None and control not in controls:
            raise UserValueError(f"{self.name}: control {control!r} is not in the dataset's "
                                 f"controls {list(controls)}")
        self.control_id = None if control is None else list(controls).index(control)
        # a latents store's batches read the chosen captions' rows from it (None: the
        # DataLoader over a latents store binds its own, loaders.caption_check)
        self.store: Any = dataset if getattr(dataset, "latents", None) is not None else None
        self.controls = list(controls)
        self.labels = {k: list(v) for k, v in labels.items()}

    def take_store(self, dataset: Any) -> None:
        """The latents store the DataLoader reads (its chosen captions' rows), unless this
        stage was given one."""
        if self.store is None:
            self.store = dataset

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return {"pick": torch.from_numpy(rng.uniform(1)[:, 0])}

    def _candidates(self, batch: Batch, i: int) -> list[str]:
        if self.source == SOURCES[0]:
            texts = batch.get("texts.text")
            if texts is None:
                return []
            strings = list(texts[i])
            ids = _row(batch.get("texts.control"), i, len(strings))
            return [s for s, c in zip(strings, ids, strict=True)
                    if self.control_id is None or c == self.control_id]
        label = batch.get("choices.label")
        if label is None:
            return []
        valid = _row(batch.get("choices.valid"), i, None)
        ids = _row(label, i, None)
        ctrl = _row(batch.get("choices.control"), i, len(ids))
        out = []
        for lab, c, ok in zip(ids, ctrl, valid or [True] * len(ids), strict=False):
            if not ok or lab < 0 or (self.control_id is not None and c != self.control_id):
                continue
            names = self.labels.get(self.controls[c], []) if 0 <= c < len(self.controls) else []
            if 0 <= lab < len(names):
                out.append(names[lab])
        return out

    def apply(self, batch: Batch, params: Params) -> Batch:
        if "latents" in batch and "image" not in batch:
            return self._apply_latents(batch, params)
        b = batch["image"].shape[0]
        current = batch.get(self.key)
        captions = list(current) if isinstance(current, list) else [""] * b
        pick = _host_list(params["pick"], b)
        for i in range(b):
            options = self._candidates(batch, i)
            if options:
                captions[i] = options[min(int(pick[i] * len(options)), len(options) - 1)]
        out = dict(batch)
        out[self.key] = captions
        return out

    def _apply_latents(self, batch: Batch, params: Params) -> Batch:
        """A latents store's batch: each sample's caption (and its embeddings) becomes its
        stored caption ``min(int(pick * n), n - 1)`` of ``n`` (the pixel path's formula)."""
        store = self.store
        if store is None or getattr(store, "latents", None) is None:
            raise UserError(f"{self.name}: a latents batch, but no latents store to read its "
                            "captions from — use it in npu_data's DataLoader over the store "
                            "(it binds the store), or pass dataset=<the latents store>")
        if self.source != SOURCES[0] or self.control is not None:
            raise UserError(f"{self.name}: a latents store holds each sample's captions, not "
                            "their controls or choices — use RandomCaption() (the default "
                            "source, no control) on its batches")
        index = batch.get("index")
        if not isinstance(index, torch.Tensor):
            raise UserError(f"{self.name}: the latents batch has no 'index' — keep the "
                            "store's keys together (its reader gives them)")
        b = int(index.shape[0])
        picks = np.asarray(_host_list(params["pick"], b), np.float64)
        got = store.chosen_captions(index.cpu().numpy(), picks)  # ShardDataset's
        if got is None:  # every sample keeps its first caption
            return batch
        texts, embeds, pooled = got
        out = dict(batch)
        out[self.key] = texts
        if embeds is not None and pooled is not None and "prompt_embeds" in batch:
            for key, rows in (("prompt_embeds", embeds), ("pooled_prompt_embeds", pooled)):
                like = batch[key]
                out[key] = rows.to(like.device, like.dtype, non_blocking=True)
        return out


def _row(values: Any, i: int, n: int | None) -> list[Any]:
    """Sample ``i``'s row of a padded (B, N) tensor or a list of lists, as a list."""
    if values is None:
        return [-1] * (n or 0)
    row = values[i]
    out = row.tolist() if isinstance(row, torch.Tensor | np.ndarray) else list(row)
    return out if n is None else (out + [-1] * n)[:n]
