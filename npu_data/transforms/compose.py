"""Compose (a pipeline whose parameters can be replayed) and Normalize."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from npu_data.errors import UserError
from npu_data.transforms import functional as F
from npu_data.transforms.draws import Draws, child_position
from npu_data.transforms.params import (
    Batch,
    Params,
    Transform,
    as_batch,
    check_generator,
    finish,
)


class Compose(Transform):
    """Run transforms in sequence. Parameters are one flat dict, child ``i``'s keys prefixed
    ``"{i}."``; each child draws on the batch as the previous children left it, so
    :meth:`get_params` runs the pipeline (use :meth:`run` to get both output and params)."""

    name = "Compose"
    needs_uint8 = False

    def __init__(self, transforms: Sequence[Transform]) -> None:
        items = list(transforms)
        if not items:
            raise UserError("Compose: give at least one transform, e.g. [RandomResizedCrop(224)]")
        for t in items:
            if not isinstance(t, Transform):
                raise UserError(
                    f"Compose: {t!r} is not an npu_data transform — use the classes from "
                    "npu_data.transforms (RandomResizedCrop, ColorJitter, ...)"
                )
        self.transforms = items

    def run(self, data: Any, generator: torch.Generator | None = None) -> tuple[Any, Params]:
        batch, bare = as_batch(data, self.name, need_uint8=False)
        check_generator(generator, batch["image"].device, self.name)
        params: Params = {}
        for i, t in enumerate(self.transforms):
            batch, p = t.run(batch, generator)
            params.update({f"{i}.{k}": v for k, v in p.items()})
        return finish(batch, bare), params

    def get_params(self, data: Any, generator: torch.Generator | None = None) -> Params:
        return self.run(data, generator)[1]

    @property
    def keyed(self) -> bool:
        return all(t.keyed for t in self.transforms)

    def output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        for t in self.transforms:
            sizes = t.output_sizes(sizes)
        return sizes

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        """Each child draws at its own position from the sizes the previous ones output."""
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
        params: Params = {}
        for i, t in enumerate(self.transforms):
            p = t.draw_keyed(sizes, keys, child_position(position, i))
            params.update({f"{i}.{k}": v for k, v in p.items()})
            sizes = t.output_sizes(sizes)
        return params

    def _split(self, params: Params, i: int) -> Params:
        prefix = f"{i}."
        return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}

    def _apply(self, batch: Batch, params: Params) -> Batch:
        for i, t in enumerate(self.transforms):
            batch = t.apply(batch, self._split(params, i))
        return batch

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        for i, t in enumerate(self.transforms):
            image = t.apply_reference(image, self._split(params, i), index)
        return image

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"{self.name}([{inner}])"


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Normalize(Transform):
    """uint8 -> ``(x / 255 - mean) / std`` in ``dtype`` (float32 by default); ``channels_last``
    picks the output memory format. Put it last: it ends the uint8 part of a pipeline."""

    name = "Normalize"

    def __init__(
        self,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
    ) -> None:
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        if len(self.mean) != len(self.std) or not self.mean:
            raise UserError(
                f"{self.name}: mean and std need one value per channel, got {len(self.mean)} "
                f"and {len(self.std)}"
            )
        if any(s <= 0 for s in self.std):
            raise UserError(f"{self.name}: std values must be > 0, got {self.std}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise UserError(f"{self.name}: dtype must be a float dtype, got {dtype!r}")
        self.dtype = dtype
        self.channels_last = bool(channels_last)

    def draw(self, sizes: np.ndarray, draws: Draws) -> Params:
        return {}

    def _apply(self, batch: Batch, params: Params) -> Batch:
        image = batch["image"]
        if image.shape[1] != len(self.mean):
            raise UserError(
                f"{self.name}: images have {image.shape[1]} channels but mean/std have "
                f"{len(self.mean)} values"
            )
        out = dict(batch)
        out["image"] = F.normalize(image, self.mean, self.std, self.dtype, self.channels_last)
        return out

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms import reference

        return np.asarray(reference.normalize(image, self.mean, self.std, channels_last=True))

    def __repr__(self) -> str:
        return f"{self.name}(mean={self.mean}, std={self.std}, dtype={self.dtype})"


def replay_reference(
    transform: Transform, image: np.ndarray, params: Params, index: int
) -> np.ndarray:
    """Sample ``index`` of a batch through the CPU reference with the batch's parameters.

    ``image`` is that sample's valid HxWx3 uint8 image (see :func:`sample_image`); ``params``
    what ``transform.run`` / ``get_params`` returned for the batch.
    """
    return transform.apply_reference(image, params, index)


def sample_image(batch: Any, index: int) -> np.ndarray:
    """Sample ``index``'s valid region as an HxWx3 numpy array (copies to the host: tests
    and tools only)."""
    b, _ = as_batch(batch, "sample_image", need_uint8=False)
    h, w = (int(v) for v in b["sizes"][index].tolist())
    return b["image"][index, :, :h, :w].permute(1, 2, 0).contiguous().cpu().numpy()
