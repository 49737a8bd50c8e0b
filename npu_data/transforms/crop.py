"""Crops and resizes: RandomResizedCrop, Resize, CenterCrop, ResizeCenterCrop.

Each draws or computes one crop box per sample, ``(top, left, height, width)`` in pixels of
the sample's valid image, and runs one batched ``functional.resized_crop`` (Pillow BILINEAR
with antialiasing); the batch's geometry keys follow through ``transforms.geometry``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserError
from npu_data.transforms import functional as F
from npu_data.transforms import geometry
from npu_data.transforms.base import Batch, Params, Transform, pair, rand
from npu_data.transforms.draws import Draws


def _check_min_visible(min_visible: float, who: str) -> float:
    if not 0.0 <= float(min_visible) <= 1.0:
        raise UserError(f"{who}: min_visible must be in [0, 1], got {min_visible!r}")
    return float(min_visible)


def _range(value: Sequence[float], what: str, who: str, positive: bool) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise UserError(f"{who}: {what} must be a pair (min, max), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0 or (
        positive and lo <= 0
    ):
        raise UserError(
            f"{who}: {what} must be a pair 0 {'<' if positive else '<='} min <= max, got "
            f"{tuple(value)!r}"
        )
    return lo, hi


class _CropBase(Transform):
    """Shared apply: one resized crop per sample to a fixed output size."""

    size: tuple[int, int]
    min_visible: float = 0.25

    def _apply(self, batch: Batch, params: Params, flip: torch.Tensor | None = None) -> Batch:
        """``flip``: a later RandomHorizontalFlip's mask, folded into the resize by Compose
        (the pixels only; the flip stage still mirrors the geometry)."""
        boxes = params["boxes"]
        out = dict(batch)
        out["image"] = F.resized_crop(batch["image"], batch["sizes"], boxes, self.size,
                                      flip=None if flip is None else flip.to(torch.bool))
        sizes = batch["sizes"]
        # one row per sample, not an expanded view (a batch's tensors must be pinnable)
        out["sizes"] = torch.tensor([self.size] * sizes.shape[0], dtype=sizes.dtype).view(
            -1, 2).to(sizes.device, non_blocking=True)
        out.update(geometry.resized_crop_geometry(batch, boxes, self.size, self.min_visible))
        return out

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms import reference

        box = [int(v) for v in params["boxes"][index].tolist()]
        return reference.resized_crop(image, box, self.size)

    def output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.size, dtype=np.int64), sizes.shape).copy()

    def draw(self, sizes: np.ndarray, draws: Draws) -> Params:
        """The boxes from the sizes alone (deterministic crops; RandomResizedCrop overrides)."""
        return self._draw({"sizes": torch.from_numpy(np.ascontiguousarray(sizes))}, None)


class RandomResizedCrop(_CropBase):
    """Crop a random area and aspect ratio per sample, resized to ``size``.

    The parameters follow torchvision's ``RandomResizedCrop.get_params``: 10 candidates per
    sample (drawn at once, ``(B, 10)``), the first that fits is used, else the same central
    fallback crop. Boxes/polygons/masks keeping less than ``min_visible`` of their area are
    marked invalid.
    """

    name = "RandomResizedCrop"
    attempts = 10

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        min_visible: float = 0.25,
    ) -> None:
        self.size = pair(size, "size", self.name)
        self.scale = _range(scale, "scale", self.name, positive=False)
        if self.scale[1] <= 0:
            raise UserError(f"{self.name}: scale max must be > 0, got {tuple(scale)!r}")
        self.ratio = _range(ratio, "ratio", self.name, positive=True)
        self.min_visible = _check_min_visible(min_visible, self.name)

    def draw(self, sizes: np.ndarray, draws: Draws) -> Params:
        """torchvision's ``get_params`` for every sample at once, in float64 on the host:
        ``attempts`` candidates from 2 draws each, the first that fits, else the central
        fallback; the position from 2 more draws (``randint``'s uniform integers)."""
        h = sizes[:, 0].astype(np.float64)
        w = sizes[:, 1].astype(np.float64)
        u = draws.uniform(2 * self.attempts).reshape(-1, self.attempts, 2)
        s0, s1 = self.scale
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        target = (h * w)[:, None] * (s0 + u[..., 0] * (s1 - s0))
        aspect = np.exp(lr0 + u[..., 1] * (lr1 - lr0))
        cw = np.round(np.sqrt(target * aspect))
        ch = np.round(np.sqrt(target / aspect))
        ok = (cw > 0) & (cw <= w[:, None]) & (ch > 0) & (ch <= h[:, None])
        first = ok.argmax(axis=1)
        found = ok.any(axis=1)
        rows = np.arange(len(h))
        rmin, rmax = self.ratio
        in_ratio = w / np.maximum(h, 1)
        fw = np.where(in_ratio > rmax, np.round(h * rmax), w)
        fh = np.where(in_ratio < rmin, np.round(w / rmin), h)
        ch = np.where(found, ch[rows, first], fh)
        cw = np.where(found, cw[rows, first], fw)
        pos = draws.uniform(2)
        top = np.where(found, np.minimum(np.floor(pos[:, 0] * (h - ch + 1)), h - ch),
                       np.floor((h - ch) / 2))
        left = np.where(found, np.minimum(np.floor(pos[:, 1] * (w - cw + 1)), w - cw),
                        np.floor((w - cw) / 2))
        boxes = np.stack([top, left, ch, cw], axis=1).astype(np.int64)
        return {"boxes": torch.from_numpy(boxes)}

    def _draw(self, batch: Batch, generator: torch.Generator | None) -> Params:
        sizes = batch["sizes"]
        dev = sizes.device
        b = sizes.shape[0]
        h = sizes[:, 0].to(torch.float32)
        w = sizes[:, 1].to(torch.float32)
        u = rand((b, self.attempts, 2), dev, generator)
        s0, s1 = self.scale
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        target = (h * w).unsqueeze(1) * (s0 + u[..., 0] * (s1 - s0))
        aspect = torch.exp(lr0 + u[..., 1] * (lr1 - lr0))
        cw = torch.round(torch.sqrt(target * aspect))
        ch = torch.round(torch.sqrt(target / aspect))
        ok = (cw > 0) & (cw <= w.unsqueeze(1)) & (ch > 0) & (ch <= h.unsqueeze(1))
        first = ok.to(torch.uint8).argmax(dim=1, keepdim=True)
        found = ok.any(dim=1)
        cw = cw.gather(1, first).squeeze(1)
        ch = ch.gather(1, first).squeeze(1)
        # torchvision's fallback: the central crop with the nearest allowed aspect ratio
        in_ratio = w / h
        rmin, rmax = self.ratio
        fw = torch.where(in_ratio > rmax, torch.round(h * rmax), w)
        fh = torch.where(in_ratio < rmin, torch.round(w / rmin), h)
        ch = torch.where(found, ch, fh)
        cw = torch.where(found, cw, fw)
        pos = rand((b, 2), dev, generator)
        top = torch.minimum(torch.floor(pos[:, 0] * (h - ch + 1)), h - ch)
        left = torch.minimum(torch.floor(pos[:, 1] * (w - cw + 1)), w - cw)
        top = torch.where(found, top, torch.floor((h - ch) / 2))
        left = torch.where(found, left, torch.floor((w - cw) / 2))
        return {"boxes": torch.stack([top, left, ch, cw], dim=1).to(torch.int64)}

    def __repr__(self) -> str:
        return (
            f"{self.name}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"min_visible={self.min_visible})"
        )


class Resize(_CropBase):
    """Resize each sample's whole valid image to ``size = (height, width)``."""

    name = "Resize"

    def __init__(self, size: int | Sequence[int], min_visible: float = 0.25) -> None:
        if isinstance(size, int) and not isinstance(size, bool):
            raise UserError(
                f"{self.name}: size={size} would resize the shorter side and give every sample "
                "its own shape — use Resize((height, width)) or ResizeCenterCrop(size)"
            )
        self.size = pair(size, "size", self.name)
        self.min_visible = _check_min_visible(min_visible, self.name)

    def _draw(self, batch: Batch, generator: torch.Generator | None) -> Params:
        sizes = batch["sizes"].to(torch.int64)
        zeros = torch.zeros_like(sizes)
        return {"boxes": torch.cat([zeros, sizes], dim=1)}

    def __repr__(self) -> str:
        return f"{self.name}(size={self.size})"


class CenterCrop(_CropBase):
    """Crop ``size`` out of the centre of each valid image (torchvision's rounding).

    A side of the image shorter than the crop is taken whole and stretched to the crop size
    (torchvision pads instead).
    """

    name = "CenterCrop"

    def __init__(self, size: int | Sequence[int], min_visible: float = 0.25) -> None:
        self.size = pair(size, "size", self.name)
        self.min_visible = _check_min_visible(min_visible, self.name)

    def _draw(self, batch: Batch, generator: torch.Generator | None) -> Params:
        sizes = batch["sizes"].to(torch.int64)
        want = torch.tensor(self.size, dtype=torch.int64).to(sizes.device, non_blocking=True)
        crop = torch.minimum(sizes, want)
        start = torch.round((sizes - crop).to(torch.float32) / 2).to(torch.int64)
        return {"boxes": torch.cat([start, crop], dim=1)}

    def __repr__(self) -> str:
        return f"{self.name}(size={self.size})"


class ResizeCenterCrop(_CropBase):
    """Resize the shorter side to ``resize_size`` (default: the crop's shorter side), then
    centre-crop ``size`` — done as one resized crop of the matching source box (the box is
    rounded to whole source pixels)."""

    name = "ResizeCenterCrop"

    def __init__(
        self,
        size: int | Sequence[int],
        resize_size: int | None = None,
        min_visible: float = 0.25,
    ) -> None:
        self.size = pair(size, "size", self.name)
        short = min(self.size)
        if resize_size is None:
            resize_size = short
        if isinstance(resize_size, bool) or not isinstance(resize_size, int) or resize_size < short:
            raise UserError(
                f"{self.name}: resize_size must be an int >= the crop's shorter side ({short}), "
                f"got {resize_size!r}"
            )
        self.resize_size = resize_size
        self.min_visible = _check_min_visible(min_visible, self.name)

    def _draw(self, batch: Batch, generator: torch.Generator | None) -> Params:
        sizes = batch["sizes"].to(torch.float32)
        scale = self.resize_size / sizes.amin(dim=1, keepdim=True)
        want = torch.tensor(self.size, dtype=torch.float32).to(sizes.device, non_blocking=True)
        crop = torch.minimum(torch.round(want / scale), sizes).clamp(min=1)
        start = torch.round((sizes - crop) / 2)
        return {"boxes": torch.cat([start, crop], dim=1).to(torch.int64)}

    def __repr__(self) -> str:
        return f"{self.name}(size={self.size}, resize_size={self.resize_size})"
