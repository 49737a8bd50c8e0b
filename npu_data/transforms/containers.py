"""RandomChoice, RandomApply and RandomOrder: torchvision v2's containers, keyed.

torchvision draws once per call (``v2/_container.py``): one choice, one coin, one order for
everything the call gets — for a batch stage such as MixUp / CutMix (the classification
reference's ``RandomChoice([MixUp, CutMix])`` in its ``collate_fn``), one per batch. Here that
one draw is keyed like MixUp's ``lam``: each sample draws an order key and its own numbers;
the sample with the smallest key decides for the batch, so the same samples get the same
draw in any order, on any worker or rank, and after a resume. Every child draws its
parameters each time (a fixed number of draws per sample), at its own position
(``draws.child_position``) when keyed; parameters are flat, child ``i``'s keys prefixed
``"{i}."`` as in ``Compose``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import (
    Batch,
    Params,
    Trait,
    Transform,
    needs_uint8,
    stage_params,
    with_stage,
)
from npu_data.transforms.draws import Draws, Uniforms, child_position

__all__ = ["RandomApply", "RandomChoice", "RandomOrder"]


def _leader(rng: Uniforms, n: int) -> np.ndarray:
    """The batch's ``n`` numbers: each sample draws an order key and ``n`` numbers; those of
    the sample with the smallest key (a batch of the same samples in any order: the same)."""
    u = rng.uniform(1 + n)
    if not len(u):
        return np.zeros(n)
    return np.asarray(u[int(np.argmin(u[:, 0])), 1:])


def _fill(value: int | float | np.ndarray, b: int, dtype: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype),
                                                                 (b, *np.shape(value)))))


class _Container(Transform):
    """Children drawn in a batch's order (``order``), applied by the subclass's rule."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        items = list(transforms) if isinstance(transforms, Sequence) else None
        if not items:
            raise UserValueError(f"{self.name}: give a list of at least one transform, e.g. "
                                 "[MixUp(), CutMix()]")
        for t in items:
            if not isinstance(t, Transform):
                raise UserTypeError(f"{self.name}: {t!r} is not an npu_data transform — use "
                                    "the classes from npu_data.transforms")
        self.transforms = items

    @property
    def traits(self) -> frozenset[Trait]:  # type: ignore[override]
        """Float images taken where a child takes them (the children check their own)."""
        return frozenset() if all(needs_uint8(t) for t in self.transforms) else frozenset(
            {Trait.FLOAT_IN})

    @property
    def keyed(self) -> bool:
        return all(t.keyed for t in self.transforms)

    # --- draws: the container's own numbers, then every child in the batch's order -------
    def own_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        raise NotImplementedError

    def order(self, own: Params) -> list[int]:
        """The order the children draw and run in (all of them; the rule picks)."""
        return list(range(len(self.transforms)))

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        return self._draw(sizes, rng, lambda i, t, s: t.make_params(s, rng))

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        return self._draw(sizes, Draws(keys, position), lambda i, t, s: t.draw_keyed(
            s, keys, child_position(position, i)))

    def _draw(self, sizes: np.ndarray, rng: Uniforms,
              draw: Callable[[int, Transform, np.ndarray], Params]) -> Params:
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        params = self.own_params(sizes, rng)
        for i in self.order(params):
            t = self.transforms[i]
            p = draw(i, t, sizes)
            params.update(with_stage(i, p))
            if i in self.applied(params):
                sizes = t.output_size(sizes, p)
        return params

    def applied(self, params: Params) -> list[int]:
        """The children that run, in order."""
        return self.order(params)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        """The applied children's, under drawn ``params``; before a draw (None) the sizes,
        where no child changes them."""
        if params is not None:
            for i in self.applied(params):
                sizes = self.transforms[i].output_size(sizes, stage_params(params, i))
            return sizes
        outs = [t.output_size(sizes) for t in self.transforms]
        if any(not np.array_equal(o, sizes) for o in outs):
            raise UserValueError(f"{self.name}: its transforms change the size, so the next "
                                 "stage cannot draw before it runs — put size-changing "
                                 "transforms outside the container")
        return np.asarray(sizes).copy()

    def apply(self, batch: Batch, params: Params) -> Batch:
        for i in self.applied(params):
            batch = self.transforms[i].apply(batch, stage_params(params, i))
        return batch

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        for i in self.applied(params):
            image = self.transforms[i].reference(image, stage_params(params, i), index)
        return image


class RandomChoice(_Container):
    """torchvision's ``RandomChoice``: one of ``transforms`` per batch, with odds ``p``
    (module doc: one keyed draw per batch).

    Args:
        transforms: npu_data transforms, at least one.
        p: Their odds (normalised to sum to 1), one per transform; None: equal odds.

    Raises:
        UserError: No transforms, one that is not an npu_data transform, or bad odds.
    """

    def __init__(self, transforms: Sequence[Transform],
                 p: Sequence[float] | None = None) -> None:
        super().__init__(transforms)
        n = len(self.transforms)
        odds = [1.0] * n if p is None else list(p)
        if len(odds) != n or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                     and math.isfinite(v) and v >= 0 for v in odds) or not (
                sum(odds) > 0):
            raise UserValueError(f"{self.name}: p must be {n} odds >= 0, not all 0 (one per "
                                 f"transform), got {p!r}")
        self.p = [float(v) / sum(odds) for v in odds]

    def own_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        u = float(_leader(rng, 1)[0])
        edges = np.cumsum(self.p)
        pick = min(int(np.searchsorted(edges, u * edges[-1], side="right")),
                   len(self.p) - 1)
        return {"choice": _fill(pick, len(sizes), np.int64)}

    def applied(self, params: Params) -> list[int]:
        choice = params["choice"]
        return [int(choice[0])] if len(choice) else []


class RandomApply(_Container):
    """torchvision's ``RandomApply``: all of ``transforms`` in order with probability ``p``,
    else none, per batch (module doc).

    Args:
        transforms: npu_data transforms, at least one.
        p: The probability of applying them.

    Raises:
        UserError: No transforms, one that is not an npu_data transform, or a bad ``p``.
    """

    def __init__(self, transforms: Sequence[Transform], p: float = 0.5) -> None:
        super().__init__(transforms)
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def own_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        on = bool(_leader(rng, 1)[0] < self.p)
        return {"apply": _fill(on, len(sizes), np.bool_)}

    def applied(self, params: Params) -> list[int]:
        on = params["apply"]
        return list(range(len(self.transforms))) if len(on) and bool(on[0]) else []


class RandomOrder(_Container):
    """torchvision's ``RandomOrder``: all of ``transforms``, in an order drawn per batch
    (module doc).

    Args:
        transforms: npu_data transforms, at least one.

    Raises:
        UserError: No transforms, or one that is not an npu_data transform.
    """

    def own_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        n = len(self.transforms)
        perm = np.argsort(_leader(rng, n), kind="stable").astype(np.int64)
        return {"order": _fill(perm, len(sizes), np.int64)}

    def order(self, own: Params) -> list[int]:
        order = own["order"]
        return [int(v) for v in order[0]] if len(order) else []
