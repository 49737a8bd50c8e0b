"""Crops: what every crop shares (applying per-sample crop parameters, geometry,
micro-conditioning) and RandomResizedCrop. Resize, CenterCrop, ResizeCenterCrop and
ResizeCrop (``transforms.resize``) build on :class:`_CropBase`.

Each crop draws or computes one crop box (or window) per sample and runs one batched
``functional.resized_crop`` (Pillow BILINEAR, BICUBIC or LANCZOS, antialiased); the batch's
geometry keys follow through ``transforms.geometry``, and the micro-conditioning keys are
written.

A crop's parameters (what its ``make_params`` returns: a ``base.CropParams``) are
``boxes (B, 4)`` int64 (top, left, height, width) in pixels of each sample's valid image,
resized to the output size; or, for the crops that resize the whole
image and keep a window of it (``ResizeCrop``, ``ResizeCenterCrop``, ``CenterCrop`` with
padding, ``Resize(int)``), also ``windows (B, 4)`` int64 (top, left, full_height,
full_width) — the box resized whole to the full size, the window at (top, left) kept,
exactly as Pillow's resize followed by a crop — and ``out (B, 2)`` each sample's valid
output size (the batch is as large as the largest). Window parameters are made on the host.

Every crop also writes SDXL's micro-conditioning keys, int64 ``(B, 2)``:
``original_size`` (h, w of the stored image: set by the first crop, kept by later ones),
``crop_top_left`` ((top, left) of the output in the resized image) and ``target_size``
(the output's valid (h, w)). For a window crop the resized image is the whole resize, so
``crop_top_left`` is the window's offset (negative where torchvision's ``CenterCrop`` pads).
For a box crop (``RandomResizedCrop``, ``Resize((h, w))``) the resized image is the whole
image scaled by the crop's own factors (``out / box`` per axis): ``crop_top_left`` is
``round(box_top * out_h / box_h), round(box_left * out_w / box_w)`` (halves up). A
Compose reports ``crop_top_left`` in the frame of its output: mirrored where a later flip
mirrors the sample (``compose.mirror_top_left``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms import geometry
from npu_data.transforms.base import (
    Batch,
    CropParams,
    Params,
    Trait,
    Transform,
    context_of,
    pair,
)
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.functional import check_interpolation

MICRO_KEYS = ("original_size", "crop_top_left", "target_size")


def check_min_visible(min_visible: float, who: str) -> float:
    if not 0.0 <= float(min_visible) <= 1.0:
        raise UserValueError(f"{who}: min_visible must be in [0, 1], got {min_visible!r}")
    return float(min_visible)


def window_params(sizes: np.ndarray, full: np.ndarray, offsets: np.ndarray,
                  out: np.ndarray) -> CropParams:
    """Window parameters (host tensors) from ``(B, 2)`` int arrays: the stored sizes, the
    full resize, the window's (top, left) and each sample's valid output size."""
    b = len(sizes)
    boxes = np.concatenate([np.zeros((b, 2), np.int64), sizes], axis=1)
    windows = np.concatenate([offsets, full], axis=1)
    return CropParams(_host(boxes), _host(windows), _host(np.asarray(out).reshape(b, 2)),
                      _host(offsets))


def box_params(boxes: np.ndarray, shape: tuple[int, int]) -> CropParams:
    """Box-crop parameters (host tensors): the boxes and their ``crop_top_left``."""
    return CropParams(_host(boxes), top_left=_host(box_top_left(boxes, shape)))


def _host(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C"))  # a writable copy


def out_shape(params: Params, size: tuple[int, int] | None) -> tuple[int, int]:
    """The batch's output (height, width): the largest valid output of a window crop,
    ``size`` for a box crop."""
    out = params.get("out")
    if out is None:
        assert size is not None
        return size
    if not len(out):
        return size if size is not None else (1, 1)
    top = out.numpy().max(axis=0)
    return int(top[0]), int(top[1])


def effective_boxes(params: Params, shape: tuple[int, int]) -> torch.Tensor:
    """The source box ``(B, 4)`` the geometry maps to the ``shape`` output: the box itself
    for a box crop; for a window, the window in source pixels (float32:
    ``box_top + win_top * box_h / full_h``, ``shape_h * box_h / full_h``, same for x)."""
    windows = params.get("windows")
    if windows is None:
        return params["boxes"]
    bx = params["boxes"].numpy().astype(np.float64)
    w = windows.numpy().astype(np.float64)
    sy, sx = bx[:, 2] / w[:, 2], bx[:, 3] / w[:, 3]
    eff = np.stack([bx[:, 0] + w[:, 0] * sy, bx[:, 1] + w[:, 1] * sx,
                    shape[0] * sy, shape[1] * sx], axis=1)
    return torch.from_numpy(eff.astype(np.float32))


def box_top_left(boxes: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A box crop's ``crop_top_left`` (B, 2) int64 on the host: ``round(top * out_h / box_h)``
    and the same for x, halves up, in integers (module doc)."""
    bx = np.asarray(boxes, np.int64).reshape(-1, 4)
    out = np.asarray(shape, np.int64)
    return (2 * bx[:, :2] * out + bx[:, 2:]) // (2 * np.maximum(bx[:, 2:], 1))


def micro_host(params: Params, batch: int, shape: tuple[int, int]
               ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(crop_top_left, target_size)`` as drawn (``crop_top_left`` None for parameters made
    by hand; ``functional.riding`` leaves out what is drawn on the device)."""
    top_left = params.get("crop_top_left")
    target = params.get("out")
    if target is None:
        target = torch.tensor([shape] * batch, dtype=torch.int64).view(-1, 2)
    return top_left, target


def micro_conditioning(params: Params, sizes: torch.Tensor, shape: tuple[int, int]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(crop_top_left, target_size)`` int64 (B, 2) on ``sizes``' device (module doc): the
    drawn ``crop_top_left`` (host or device), else computed from the boxes where they are.
    Host values ride with the crop's copy where they can (``functional.riding``)."""
    top_left = params.get("crop_top_left")
    if top_left is None:  # parameters made by hand: from the boxes, on their device
        bx = params["boxes"].to(torch.int64)
        out_t = torch.tensor(shape, dtype=torch.int64).to(bx.device, non_blocking=True)
        top_left = torch.div(2 * bx[:, :2] * out_t + bx[:, 2:], 2 * bx[:, 2:].clamp(min=1),
                             rounding_mode="floor")
    _, target = micro_host(params, sizes.shape[0], shape)
    return (F.take("crop.top_left", top_left, sizes.device),
            F.take("crop.target", target, sizes.device))


class _CropBase(Transform):
    """Shared apply: one resized crop (or window) per sample; geometry and micro-conditioning
    follow. ``size`` is the output size (None: per batch, from the parameters)."""

    size: tuple[int, int] | None
    min_visible: float = 0.25
    interpolation: str = "bilinear"  # the resize filter (``functional.INTERPOLATIONS``)
    # every sample fills the whole output (no padding): Compose may fold a following flip into
    # the resize and tell the colour steps after it that there is no padding
    traits = frozenset({Trait.CROP, Trait.FILLS})

    def apply(self, batch: Batch, params: Params) -> Batch:
        """``ApplyContext.flip`` (:func:`~npu_data.transforms.base.context_of`): a later
        mirror's mask, folded into the resize by Compose for crops that fill their output
        (``Trait.FILLS``; the pixels only, the mirror stage still moves the geometry)."""
        flip = context_of(self).flip
        shape = out_shape(params, self.size)
        out = dict(batch)
        sizes = batch["sizes"]
        windows = params.get("windows")
        if windows is None:
            # one row per sample, not an expanded view (a batch's tensors must be pinnable)
            new_sizes = torch.tensor([shape] * sizes.shape[0], dtype=sizes.dtype).view(-1, 2)
        else:
            new_sizes = params["out"].to(sizes.dtype)
        top_left, target = micro_host(params, sizes.shape[0], shape)
        riders = {"crop.sizes": new_sizes, "crop.target": target}
        if top_left is not None:
            riders["crop.top_left"] = top_left
        with F.riding(riders):  # the new sizes and micro-conditioning ride with the crop's copy
            out["image"] = F.resized_crop(batch["image"], sizes, params["boxes"], shape,
                                          windows=windows,
                                          flip=None if flip is None else flip.to(torch.bool),
                                          interpolation=self.interpolation)
            out["sizes"] = F.take("crop.sizes", new_sizes, sizes.device)
            out.update(self.micro_keys(batch, params, shape))
        out.update(geometry.resized_crop_geometry(batch, effective_boxes(params, shape), shape,
                                                  self.min_visible))
        return out

    def micro_keys(self, batch: Batch, params: Params, shape: tuple[int, int]) -> Batch:
        """The micro-conditioning keys of the output (module doc)."""
        sizes = batch["sizes"]
        top_left, target = micro_conditioning(params, sizes, shape)
        original = batch.get("original_size")
        if not isinstance(original, torch.Tensor):
            original = sizes.to(torch.int64)  # not written in place by anything
        return {"original_size": original, "crop_top_left": top_left, "target_size": target}

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        box = [int(v) for v in params["boxes"][index].tolist()]
        windows = params.get("windows")
        if windows is None:
            assert self.size is not None
            return reference.resized_crop(image, box, self.size, self.interpolation)
        window = [int(v) for v in windows[index].tolist()]
        valid = tuple(int(v) for v in params["out"][index].tolist())
        return reference.resized_window(image, box, window, valid, self.interpolation)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        assert self.size is not None
        return np.broadcast_to(np.asarray(self.size, dtype=np.int64), sizes.shape).copy()


# --- RandomResizedCrop ---
def _range(value: Sequence[float], what: str, who: str, positive: bool) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as e:
        error = UserTypeError if isinstance(e, TypeError) else UserValueError
        raise error(f"{who}: {what} must be a pair (min, max), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0 or (
        positive and lo <= 0
    ):
        raise UserValueError(
            f"{who}: {what} must be a pair 0 {'<' if positive else '<='} min <= max, got "
            f"{tuple(value)!r}"
        )
    return lo, hi


class RandomResizedCrop(_CropBase):
    """Crop a random area and aspect ratio per sample, resized to ``size``.

    The parameters follow torchvision's ``RandomResizedCrop.get_params``: 10 candidates per
    sample (drawn at once, ``(B, 10)``), the first that fits is used, else the same central
    fallback crop (:meth:`make_params`, float64 on the host, keyed or from a generator).

    Args:
        size: The output (height, width), or one int for both.
        scale: (min, max) fraction of the image's area the crop covers, 0 <= min <= max.
        ratio: (min, max) aspect ratio (width / height) of the crop, 0 < min <= max.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid; 0 (torchvision keeps them all): only those with nothing left
            inside (``min_visible=0.25``: the rule before 2026-12-07).
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"`` (Pillow's filters).

    Raises:
        UserError: A ``size`` that is not positive ints, a ``scale`` or ``ratio`` that is not an
            ordered pair in range, a ``min_visible`` outside [0, 1], or an unknown
            ``interpolation``.
    """

    attempts = 10
    size: tuple[int, int]

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        min_visible: float = 0.0,
        interpolation: str = "bilinear",
    ) -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.size = pair(size, "size", self.name)
        self.scale = _range(scale, "scale", self.name, positive=False)
        if self.scale[1] <= 0:
            raise UserValueError(f"{self.name}: scale max must be > 0, got {tuple(scale)!r}")
        self.ratio = _range(ratio, "ratio", self.name, positive=True)
        self.min_visible = check_min_visible(min_visible, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> CropParams:
        """torchvision's ``get_params`` for every sample at once, in float64 on the host:
        ``attempts`` candidates from 2 draws each, the first that fits, else the central
        fallback; the position from 2 more draws (``randint``'s uniform integers)."""
        h = sizes[:, 0].astype(np.float64)
        w = sizes[:, 1].astype(np.float64)
        u = rng.uniform(2 * self.attempts).reshape(-1, self.attempts, 2)
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
        pos = rng.uniform(2)
        top = np.where(found, np.minimum(np.floor(pos[:, 0] * (h - ch + 1)), h - ch),
                       np.floor((h - ch) / 2))
        left = np.where(found, np.minimum(np.floor(pos[:, 1] * (w - cw + 1)), w - cw),
                        np.floor((w - cw) / 2))
        boxes = np.stack([top, left, ch, cw], axis=1).astype(np.int64)
        return box_params(boxes, self.size)

