"""Compose: a pipeline whose parameters are one flat dict and can be replayed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import (
    Batch,
    Params,
    Transform,
    as_batch,
    check_generator,
    finish,
)
from npu_data.transforms.donate import donating, fresh
from npu_data.transforms.draws import Uniforms, child_position
from npu_data.transforms.flip_order import mirror_crops


class Compose(Transform):
    """Run transforms in sequence.

    Parameters are one flat dict, child ``i``'s keys prefixed ``"{i}."``; each child draws on
    the batch as the previous children left it, so ``get_params`` runs the pipeline (use
    ``run`` to get both output and params).

    Args:
        transforms: npu_data transforms, at least one, applied in this order.

    Raises:
        UserError: No transforms, or one that is not an npu_data transform.
    """

    name = "Compose"
    needs_uint8 = False

    def __init__(self, transforms: Sequence[Transform]) -> None:
        items = list(transforms)
        if not items:
            raise UserValueError(
                "Compose: give at least one transform, e.g. [RandomResizedCrop(224)]"
            )
        for t in items:
            if not isinstance(t, Transform):
                raise UserTypeError(
                    f"Compose: {t!r} is not an npu_data transform — use the classes from "
                    "npu_data.transforms (RandomResizedCrop, ColorJitter, ...)"
                )
        self.transforms = items

    def run(self, data: Any, generator: torch.Generator | None = None) -> tuple[Any, Params]:
        batch, bare = as_batch(data, self.name, need_uint8=False, latents=self.takes_latents)
        lead = batch["image"] if "image" in batch else batch["latents"]
        check_generator(generator, lead.device, self.name)
        if self.keyed and "image" in batch:  # every stage's parameters first (a flip moves
            params = self.get_params(batch, generator)  # the crop before it)
            return finish(self._apply(batch, params), bare), params
        params = {}
        for i, t in enumerate(self.transforms):
            batch, p = t.run(batch, generator)
            params.update({f"{i}.{k}": v for k, v in p.items()})
        return finish(batch, bare), params

    def get_params(self, data: Any, generator: torch.Generator | None = None) -> Params:
        if not self.keyed:
            return self.run(data, generator)[1]
        return super().get_params(data, generator)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """Each stage's parameters in turn from the sizes the previous ones output, one
        ``rng`` for all; a crop followed by a flip is moved for the flipped samples
        (``transforms.flip_order``)."""
        return self._draw(sizes, lambda i, t, s: t.make_params(s, rng))

    @property
    def keyed(self) -> bool:
        return all(t.keyed for t in self.transforms)

    @property
    def takes_latents(self) -> bool:  # type: ignore[override]
        return all(t.takes_latents for t in self.transforms)

    def output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        for t in self.transforms:
            sizes = t.output_sizes(sizes)
        return sizes

    def drawn_sizes(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        for i, t in enumerate(self.transforms):
            sizes = t.drawn_sizes(sizes, self._split(params, i))
        return sizes

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        """Each child draws at its own position from the sizes the previous ones output."""
        return self._draw(sizes, lambda i, t, s: t.draw_keyed(s, keys, child_position(position,
                                                                                    i)))

    def _draw(self, sizes: np.ndarray,
              draw: Callable[[int, Transform, np.ndarray], Params]) -> Params:
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
        params: Params = {}
        inputs = []
        for i, t in enumerate(self.transforms):
            inputs.append(sizes)
            p = draw(i, t, sizes)
            params.update({f"{i}.{k}": v for k, v in p.items()})
            sizes = t.drawn_sizes(sizes, p)
        mirror_crops(self.transforms, params, inputs)
        return params

    def leading_crop(self, position: int = 0) -> tuple[Transform, int] | None:
        """The first stage's crop when every stage is keyed (not a nested Compose's)."""
        first = self.transforms[0]
        if not self.keyed or isinstance(first, Compose):
            return None
        return first.leading_crop(child_position(position, 0))

    def apply_rest(self, batch: Batch, params: Params) -> Batch:
        """The stages after the first (a reader applied it), with the pipeline's params; the
        batch is full (no padding) when that crop fills its output."""
        return apply_stages(self.transforms[1:], batch, params, first=1,
                            full=bool(getattr(self.transforms[0], "fills", False)))

    def _split(self, params: Params, i: int) -> Params:
        prefix = f"{i}."
        return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}

    def _apply(self, batch: Batch, params: Params) -> Batch:
        return apply_stages(self.transforms, batch, params)

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        for i, t in enumerate(self.transforms):
            image = t.apply_reference(image, self._split(params, i), index)
        return image

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"{self.name}([{inner}])"



def fusions(stages: Sequence[Transform], full: bool = False
            ) -> tuple[dict[int, int], list[bool]]:
    """What :func:`apply_stages` fuses: ``{crop: flip}`` for a RandomHorizontalFlip that
    follows a crop with only ColorJitters between (they commute with a mirror: per pixel, and
    contrast's mean is mirror-free), whose pixels the crop's resize mirrors instead; and per
    stage whether every sample fills the batch when it runs (after a crop; ``full`` at the
    start)."""
    from npu_data.transforms.color import ColorJitter
    from npu_data.transforms.crop_base import _CropBase
    from npu_data.transforms.flip import RandomHorizontalFlip

    folds: dict[int, int] = {}
    filled = []
    for i, t in enumerate(stages):
        filled.append(full)
        if isinstance(t, _CropBase) and t.fills:
            full = True
            for j in range(i + 1, len(stages)):
                if isinstance(stages[j], RandomHorizontalFlip):
                    folds[i] = j
                    break
                if not isinstance(stages[j], ColorJitter):
                    break
        elif isinstance(t, _CropBase) or not isinstance(t, ColorJitter | RandomHorizontalFlip):
            full = False
    return folds, filled


def apply_stages(stages: Sequence[Transform], batch: Batch, params: Params, first: int = 0,
                 full: bool = False) -> Batch:
    """``stages`` in turn, stage ``i`` with the keys of ``params`` prefixed ``"<first + i>."``.
    An image one stage allocated is donated to the next ones (``transforms.donate``: they may
    write into it); the caller's image only if the caller donated it. ``full``: every sample
    fills the incoming batch (no padding). Crops, flips and jitters fuse (:func:`fusions`)."""
    from npu_data.transforms.color import ColorJitter

    folds, filled = fusions(stages, full)
    folded = set(folds.values())

    def share(i: int) -> Params:
        prefix = f"{i + first}."
        return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}

    owned: torch.Tensor | None = None  # the image an earlier stage allocated
    for i, t in enumerate(stages):
        hints: dict[str, Any] = {}
        if i in folds:
            hints["flip"] = share(folds[i])["flip"]
        if i in folded:
            hints["pixels"] = False
        if filled[i] and isinstance(t, ColorJitter):
            hints["full"] = True
        before = batch.get("image")
        with donating(owned) if owned is not None and before is owned else _caller():
            if hints:  # a batch dict already: the stage's own checks run in functional
                batch = t._apply(batch, share(i), **hints)  # type: ignore[call-arg]
            else:
                batch = t.apply(batch, share(i))
        after = batch.get("image")
        if fresh(after, before):
            owned = after
    return batch


_caller = contextlib.nullcontext  # keep whatever the caller donated
