"""Compose: a pipeline whose parameters are one flat dict and can be replayed.

:meth:`Compose.split` hands a reader the pipeline's leading crop (:class:`Split`) and what is
left after it; :func:`apply_stages` runs stages (:func:`executed`'s order), fusing them by their declared capabilities
(:func:`fusions`) and telling each what it knows through one ``ApplyContext``.

**Stages in the order written; ``crop_top_left`` in the frame of the output.** A crop
followed by a flip gives ``flip(crop(x))``, a flip followed by a crop ``crop(flip(x))``, as
torchvision's ``Compose``. Every crop reports ``crop_top_left`` as its window's place in the
frame of the pixels that come out: where a later flip mirrors a sample, the window mirrored
(:func:`mirror_top_left`, ``left -> W - left - w`` in the crop's resized image) — diffusers'
convention (SDXL's ``train_text_to_image_sdxl.py`` since PR #6547: pixels
``crop(flip(resize(image)))``, ``crop_top_left`` the window in the mirrored image). A pipeline
written in diffusers' order, ``[RandomHorizontalFlip, crop, ...]`` (``NpuPreprocessor``), draws
the window in the mirrored image and reports it as drawn.

Two exact rewrites keep that fast: a flip right before a crop runs after it
(:func:`executed`: ``crop(flip(x))`` is ``flip(crop'(x))`` with the window mirrored,
:func:`mirror_window`; Pillow's resize commutes with a mirror), so a reader may still apply
the crop while reading (:meth:`Compose.split`); and a flip after a crop is folded into the
crop's resize (:func:`fusions`).

**Donated images** (``base.donating``): ``Compose`` donates what one stage
allocated to the stages after it (never the caller's input unless the caller donated it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import (
    DEFAULT,
    ApplyContext,
    Batch,
    CropParams,
    Params,
    Trait,
    Transform,
    as_batch,
    check_generator,
    donating,
    finish,
    flip_mask,
    fresh,
    fused,
    keeps_full,
    mirror_free,
    stage_key,
    stage_params,
    with_stage,
)
from npu_data.transforms.draws import Uniforms, child_position


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
        batch, bare = as_batch(data, self.name, need_uint8=False,
                               latents=Trait.LATENTS in self.traits)
        lead = batch["image"] if "image" in batch else batch["latents"]
        check_generator(generator, lead.device, self.name)
        if self.keyed and "image" in batch:  # every stage's parameters first (a flip moves
            params = self.get_params(batch, generator)  # the crop before it)
            return finish(self.apply(batch, params), bare), params
        params = {}
        for i, t in enumerate(self.transforms):
            batch, p = t.run(batch, generator)
            params.update(with_stage(i, p))
        return finish(batch, bare), params

    def get_params(self, data: Any, generator: torch.Generator | None = None) -> Params:
        if not self.keyed:
            return self.run(data, generator)[1]
        return super().get_params(data, generator)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """Each stage's parameters in turn from the sizes the previous ones output, one
        ``rng`` for all; a crop followed by a flip reports its window mirrored for the
        flipped samples (:func:`mirror_top_left`)."""
        return self._draw(sizes, lambda i, t, s: t.make_params(s, rng))

    @property
    def keyed(self) -> bool:
        return all(t.keyed for t in self.transforms)

    @property
    def traits(self) -> frozenset[Trait]:  # type: ignore[override]
        """Any image dtype (each stage checks its own); latents batches when every stage
        takes them."""
        latents = all(Trait.LATENTS in t.traits for t in self.transforms)
        return frozenset({Trait.FLOAT_IN, Trait.LATENTS} if latents else {Trait.FLOAT_IN})

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        for i, t in enumerate(self.transforms):
            sizes = t.output_size(sizes, None if params is None else stage_params(params, i))
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
            params.update(with_stage(i, p))
            sizes = t.output_size(sizes, p)
        mirror_top_left(self.transforms, params, inputs)
        for i in range(1, len(self.transforms)):  # a crop a flip written before it runs
            if _crops(self.transforms[i]) and _hflip(self.transforms[i - 1]):  # after: its
                params.setdefault(stage_key(i, "sizes"), torch.from_numpy(  # input sizes
                    np.ascontiguousarray(inputs[i], np.int64)))
        return params

    def split(self) -> Split | None:
        """The pipeline's leading crop and the stages after it, when every stage is keyed
        and the first is a crop (``Trait.CROP``; a nested Compose is not), or a
        flip right before one (run after it, :func:`executed`)."""
        if not self.keyed:
            return None
        order = executed(self.transforms)
        first = self.transforms[order[0]]
        if not _crops(first):
            return None
        flip = order[1] if order[0] == 1 else None
        rest = Rest(tuple(self.transforms[i] for i in order[1:]), first=1,
                    full=Trait.FILLS in first.traits,
                    indices=tuple(order[1:]))
        return Split(first, child_position(0, order[0]), rest, index=order[0], flip=flip)

    def apply(self, batch: Batch, params: Params) -> Batch:
        return apply_stages(self.transforms, batch, params)

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        for i, t in enumerate(self.transforms):
            image = t.reference(image, stage_params(params, i), index)
        return image

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"{self.name}([{inner}])"


@dataclass(frozen=True)
class Rest:
    """The stages of a pipeline after its leading crop, for a reader that applied the crop.

    Attributes:
        stages: the stages after the crop, in the order they run.
        first: the index of ``stages[0]`` in the pipeline (stages in order after it).
        full: the crop fills its output: every sample fills the batch (no padding).
        indices: each stage's index in the pipeline, where they are not ``first, first + 1,
            ...`` (a flip written before the crop runs after it, :func:`executed`).
    """

    stages: tuple[Transform, ...] = ()
    first: int = 1
    full: bool = False
    indices: tuple[int, ...] | None = None

    def apply(self, batch: Batch, params: Params) -> Batch:
        """The stages on the cropped ``batch``, with the WHOLE pipeline's ``params`` (drawn
        once)."""
        indices = self.indices if self.indices is not None else tuple(
            range(self.first, self.first + len(self.stages)))
        return run_stages(self.stages, indices, batch, params, self.full)


@dataclass(frozen=True)
class Split:
    """A keyed transform as a reader runs it: ``crop`` while reading, then ``rest``.

    Attributes:
        crop: the leading crop (``Trait.CROP``, keyed).
        position: its draw position in the transform (``draws.child_position``).
        rest: what is left after it (:meth:`Rest.apply` takes the whole transform's params).
        index: the crop's stage index in the transform (0 for a crop alone).
        flip: the index of a flip written right before the crop (it runs after it, the
            crop's window mirrored for the samples it flips: :func:`read_params`), or None.
    """

    crop: Transform
    position: int
    rest: Rest
    index: int = 0
    flip: int | None = None

    def read_params(self, params: Params, whole: bool, sizes: np.ndarray) -> Params:
        """The crop's own parameters as a reader applies them, out of the transform's
        ``params`` (``whole``: a pipeline's, else the crop's alone) for input ``sizes``."""
        if not whole:
            return dict(params)
        own = dict(params)
        if self.flip is not None:
            mask = flip_mask(stage_params(params, self.flip))
            assert mask is not None
            mirror_window(own, self.index, mask.cpu(), sizes)
        return stage_params(own, self.index)


def split(transform: Any) -> Split | None:
    """The leading crop a reader may apply for ``transform`` while reading its input: a keyed
    crop alone (nothing left) or a keyed Compose's first stage (:meth:`Compose.split`); None:
    none (not one of ours, not keyed, no leading crop)."""
    if not isinstance(transform, Transform):
        return None
    lead = getattr(transform, "split", None)
    if callable(lead):  # a pipeline: its leading crop
        return lead()  # type: ignore[no-any-return]
    if _crops(transform) and transform.keyed:
        return Split(transform, 0, Rest())
    return None


def _crops(t: Transform) -> bool:
    return Trait.CROP in t.traits


def _hflip(t: Transform) -> bool:
    return Trait.HFLIP in t.traits


def fusions(stages: Sequence[Transform], full: bool = False
            ) -> tuple[dict[int, int], list[bool]]:
    """What :func:`apply_stages` fuses, from the stages' declared capabilities:
    ``{crop: mirror}`` for a horizontal mirror (``Trait.HFLIP``) after a crop that fills its
    output (``Trait.CROP``, ``Trait.FILLS``: it mirrors while resizing) with only stages
    between that commute with a mirror and keep the batch full (``base.mirror_free``,
    ``base.keeps_full``: the colour jitter), whose pixels the crop's resize mirrors instead;
    and per stage whether every sample fills the batch when it runs (after such a crop,
    through stages that keep it full; ``full`` at the start)."""
    folds: dict[int, int] = {}
    filled = []
    for i, t in enumerate(stages):
        filled.append(full)
        fills = Trait.FILLS in t.traits
        full = fills or (full and keeps_full(t))
        if not (fills and _crops(t)):
            continue
        for j in range(i + 1, len(stages)):
            if _hflip(stages[j]):
                folds[i] = j
                break
            if not (mirror_free(stages[j]) and keeps_full(stages[j])):
                break
    return folds, filled


def stage_context(index: int, stages: Sequence[Transform], params: Params,
                  indices: Sequence[int], folds: dict[int, int], filled: list[bool]
                  ) -> ApplyContext:
    """What :func:`run_stages` tells stage ``index`` (:func:`fusions`' findings;
    ``indices``: each stage's pipeline index, for its parameters)."""
    mirror = folds.get(index)
    flip = None if mirror is None else flip_mask(stage_params(params, indices[mirror]))
    pixels = index not in folds.values()
    full = True if filled[index] and keeps_full(stages[index]) else None
    if flip is None and pixels and full is None:
        return DEFAULT
    return ApplyContext(flip=flip, pixels=pixels, full=full)


def executed(stages: Sequence[Transform]) -> list[int]:
    """The order ``stages`` run in: as written, but a horizontal flip written right before a
    crop runs right after it (module doc; :func:`run_stages` mirrors the crop's window for the
    samples the flip mirrors)."""
    order = list(range(len(stages)))
    i = 0
    while i + 1 < len(order):
        if _hflip(stages[order[i]]) and _crops(stages[order[i + 1]]):
            order[i], order[i + 1] = order[i + 1], order[i]
            i += 2
        else:
            i += 1
    return order


def apply_stages(stages: Sequence[Transform], batch: Batch, params: Params, first: int = 0,
                 full: bool = False) -> Batch:
    """``stages`` as written (stage ``i``'s keys of ``params`` prefixed ``"<first + i>."``),
    run in the :func:`executed` order; ``full``: every sample fills the incoming batch."""
    order = executed(stages)
    return run_stages([stages[i] for i in order], [first + i for i in order], batch, params,
                      full)


def run_stages(stages: Sequence[Transform], indices: Sequence[int], batch: Batch,
               params: Params, full: bool = False) -> Batch:
    """``stages`` in turn, each with the keys of ``params`` of its pipeline index in
    ``indices``; a crop run before a flip written before it (:func:`executed`) takes its
    window mirrored for the flipped samples. An image one stage allocated is donated to the
    next ones (module doc: they may write into it); the caller's image only if the caller
    donated it. ``full``: every sample fills the incoming batch (no padding). Crops, flips
    and jitters fuse (:func:`fusions`)."""
    folds, filled = fusions(stages, full)
    owned: torch.Tensor | None = None  # the image an earlier stage allocated
    with F.riding(stage_riders(stages, indices, batch, params, folds, filled)):
        for i, t in enumerate(stages):
            ctx = stage_context(i, stages, params, indices, folds, filled)
            own = stage_params(_moved_crop(stages, indices, i, batch, params), indices[i])
            before = batch.get("image")
            with donating(owned) if owned is not None and before is owned else _caller(), \
                    fused(t, ctx) if ctx is not DEFAULT else _caller():
                batch = t.apply(batch, own)
            after = batch.get("image")
            if fresh(after, before):
                owned = after
    return batch


def stage_riders(stages: Sequence[Transform], indices: Sequence[int], batch: Batch,
                 params: Params, folds: dict[int, int], filled: list[bool]
                 ) -> dict[str, torch.Tensor]:
    """What the stages after a crop that fills its output will copy to the device
    (:meth:`Transform.riders`, host tensors made now), to ride with the batch's first copy:
    one host-to-device copy per batch. None on the host (nothing is copied there)."""
    image = batch.get("image")
    if not isinstance(image, torch.Tensor) or not F.copies_to(image.device):
        return {}
    out: dict[str, torch.Tensor] = {}
    shape: tuple[int, int] | None = None
    for i, t in enumerate(stages):
        if filled[i] and shape is not None:
            ctx = stage_context(i, stages, params, indices, folds, filled)
            out.update(t.riders(stage_params(params, indices[i]), ctx,
                                (image.shape[0], *shape)))
        size = getattr(t, "size", None)
        own = stage_params(params, indices[i])
        if _crops(t) and Trait.FILLS in t.traits and isinstance(size, tuple) and \
                CropParams.of(own).windows is None:
            shape = size
        elif not keeps_full(t):
            shape = None
    return out


def _moved_crop(stages: Sequence[Transform], indices: Sequence[int], k: int, batch: Batch,
                params: Params) -> Params:
    """``params`` with the window of stage ``k`` mirrored for the samples the flip after it
    mirrors, where that flip was written right before it (:func:`executed`; a copy), else
    ``params``. The crop's input sizes: those it was drawn for (``Compose`` keeps them), else
    the batch's as it comes (read back)."""
    if not (_crops(stages[k]) and k + 1 < len(stages) and _hflip(stages[k + 1])
            and indices[k + 1] < indices[k]):
        return params
    flip = flip_mask(stage_params(params, indices[k + 1]))
    if flip is None:
        return params
    drawn = params.get(stage_key(indices[k], "sizes"))
    sizes = drawn if drawn is not None else batch["sizes"].to("cpu")
    moved = dict(params)
    mirror_window(moved, indices[k], flip.cpu(),
                  sizes.numpy().astype(np.int64).reshape(-1, 2))
    return moved


_caller = contextlib.nullcontext  # keep whatever the caller donated


# --- crop_top_left in the frame of the output (module doc) ---
def mirror_top_left(stages: Sequence[Transform], params: Params,
                    inputs: Sequence[np.ndarray], first: int = 0) -> None:
    """Mirror, in place, the ``crop_top_left`` of the crop before each horizontal mirror of
    ``stages`` for the samples it flips (module doc): the window's place in the mirrored
    output. Only stages that commute with a mirror (``base.mirror_free``) may stand
    between the two; a flip written right before a crop (it draws in the mirrored image
    already) changes nothing.

    Args:
        stages: a pipeline's stages in order.
        params: its flat parameters, stage ``i``'s keys those of ``first + i``
            (``base.stage_key``).
        inputs: each stage's input sizes (B, 2).
        first: the index of stage 0.
    """
    for j, t in enumerate(stages):
        flip = flip_mask(stage_params(params, first + j)) if _hflip(t) else None
        if flip is None:
            continue
        i = j - 1
        while i >= 0 and not _crops(stages[i]) and mirror_free(stages[i]):
            i -= 1
        if i >= 0 and _crops(stages[i]):
            _mirror_reported(params, first + i, flip.cpu().numpy(), inputs[i],
                             getattr(stages[i], "size", None))


def _mirror_reported(params: Params, index: int, mask: np.ndarray, sizes: np.ndarray,
                     size: tuple[int, int] | None) -> None:
    """``crop_top_left`` of the crop at ``index`` mirrored where ``mask`` (B,) is set: a
    window's ``full_w - left - out_w``; a box crop's that of its mirrored box."""
    crop = CropParams.of(stage_params(params, index))
    if crop.top_left is None:
        return
    top_left = crop.top_left.numpy().copy()
    if crop.windows is not None and crop.out is not None:
        w = crop.windows.numpy()
        mirrored = w[:, 3] - top_left[:, 1] - crop.out.numpy()[:, 1]
    else:  # ``crop.box_top_left`` of the mirrored box: round(left * out_w / box_w), halves up
        b = crop.boxes.numpy().astype(np.int64)
        left = sizes[:, 1] - b[:, 1] - b[:, 3]
        assert size is not None
        mirrored = (2 * left * size[1] + b[:, 3]) // (2 * np.maximum(b[:, 3], 1))
    top_left[:, 1] = np.where(mask, mirrored, top_left[:, 1])
    params.update(with_stage(index, replace(crop, top_left=torch.from_numpy(top_left)
                                            ).as_params()))


def mirror_window(params: Params, index: int, flip: torch.Tensor, sizes: np.ndarray) -> None:
    """The source window of the crop at stage ``index`` mirrored where ``flip`` (B,) is set
    (a crop run before the flip written before it, :func:`executed`); its ``crop_top_left``
    (the window in the mirrored image) stays as drawn. Drawn parameters are host tensors:
    this is numpy work on the host, no device op."""
    mask = flip.numpy()
    crop = CropParams.of(stage_params(params, index))
    if crop.windows is not None and crop.out is not None:
        w = crop.windows.numpy().copy()
        w[:, 1] = np.where(mask, w[:, 3] - w[:, 1] - crop.out.numpy()[:, 1], w[:, 1])
        crop = replace(crop, windows=torch.from_numpy(w))
    else:
        b = crop.boxes.numpy().copy()
        b[:, 1] = np.where(mask, sizes[:, 1] - b[:, 1] - b[:, 3], b[:, 1])
        crop = replace(crop, boxes=torch.from_numpy(b))
    params.update(with_stage(index, crop.as_params()))
