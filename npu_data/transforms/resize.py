"""Resizes and centre/bucket crops, exact to torchvision's PIL path: Resize, CenterCrop,
ResizeCenterCrop, ResizeCrop.

Each resizes the whole valid image (Pillow BILINEAR, antialiased) and keeps a window of the
result (``transforms.crop``): the pixels of ``Image.resize`` followed by ``Image.crop``, not of a
rounded source box. The sizes follow torchvision 0.28's code:

- ``Resize(int)``: ``_compute_resized_output_size`` (torchvision/transforms/functional.py
  lines 353-384): the shorter side becomes ``size``, the longer ``int(size * long / short)``
  (truncated); ``max_size`` caps the longer side the same way.
- ``CenterCrop``: ``_center_crop_compute_padding`` and ``_center_crop_compute_crop_anchor``
  (torchvision/transforms/v2/functional/_geometry.py lines 2564-2578, used by the PIL kernel
  ``_center_crop_image_pil`` at 2602-2616): a side shorter than the crop is padded with 0,
  ``(crop - side) // 2`` before it; otherwise the offset is ``int(round((side - crop) / 2))``
  (Python's round: halves to even).

Window parameters are made on the host from the sizes (``make_params``: keyed draws, the
DataLoader's path, or a generator's; a batch on an accelerator transformed directly reads
its ``sizes`` back once).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_data.buckets import SDXL, Buckets, BucketSpec, buckets_of
from npu_data.errors import UserError, UserValueError
from npu_data.transforms.base import Params, Trait, pair
from npu_data.transforms.crop import (
    _CropBase,
    box_params,
    check_min_visible,
    window_params,
)
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.functional import check_interpolation


def shorter_side_sizes(sizes: np.ndarray, size: int, max_size: int | None = None
                       ) -> np.ndarray:
    """torchvision's ``Resize(size, max_size)`` output (height, width) of each (B, 2) size."""
    h = sizes[:, 0].astype(np.int64)
    w = sizes[:, 1].astype(np.int64)
    portrait = w <= h
    short = np.where(portrait, w, h).astype(np.float64)
    long = np.where(portrait, h, w).astype(np.float64)
    new_short: np.ndarray = np.full(len(h), size, np.int64)
    new_long: np.ndarray = np.trunc(size * long / short).astype(np.int64)
    if max_size is not None:
        over = new_long > max_size
        new_short = np.where(over, np.trunc(max_size * new_short / np.maximum(new_long, 1)),
                             new_short).astype(np.int64)
        new_long = np.where(over, max_size, new_long)
    return np.stack([np.where(portrait, new_long, new_short),
                     np.where(portrait, new_short, new_long)], axis=1)


def center_offsets(full: np.ndarray, crop: np.ndarray) -> np.ndarray:
    """torchvision's ``CenterCrop`` offset of a ``crop`` in a ``full`` image, per axis (B, 2):
    ``-((crop - full) // 2)`` where it pads, else ``round((full - crop) / 2)`` (halves to
    even)."""
    pad = crop > full
    anchor = np.round((full - crop) / 2.0).astype(np.int64)
    return np.where(pad, -((crop - full) // 2), anchor).astype(np.int64)


def cover_sizes(sizes: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``ResizeCrop``'s resize of each (h, w) to cover its target (th, tw): scale
    ``max(th / h, tw / w)``; the side that sets it becomes its target exactly, the other
    ``max(t, round_half_up(side * scale))`` — in integers."""
    h, w = sizes[:, 0].astype(np.int64), sizes[:, 1].astype(np.int64)
    th, tw = targets[:, 0].astype(np.int64), targets[:, 1].astype(np.int64)
    by_height = th * w >= tw * h  # th / h >= tw / w
    nw = np.maximum(tw, (2 * w * th + h) // (2 * h))
    nh = np.maximum(th, (2 * h * tw + w) // (2 * w))
    return np.stack([np.where(by_height, th, nh), np.where(by_height, nw, tw)], axis=1)


class _WindowCrop(_CropBase):
    """A crop whose parameters are windows computed on the host from the sizes."""

    # Resize(int) keeps aspect ratios, CenterCrop pads: outputs may not fill
    traits = frozenset({Trait.CROP})

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
        u = rng.uniform(self.random_draws) if self.random_draws else None
        return self.windows(sizes, u)

    random_draws = 0  # uniform numbers each sample draws

    def windows(self, sizes: np.ndarray, u: np.ndarray | None) -> Params:
        raise NotImplementedError

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
        u = np.zeros((len(sizes), self.random_draws)) if self.random_draws else None
        return self.windows(sizes, u)["out"].numpy()


class Resize(_WindowCrop):
    """torchvision's ``Resize``.

    Each sample keeps its own shape with ``size=int``: the batch is padded to the largest and
    ``sizes`` holds each one's.

    Args:
        size: ``(h, w)``: every sample resized to that size; an int: each sample's shorter side
            resized to it, the longer in proportion (truncated, as torchvision).
        max_size: With ``size=int``, the longest the longer side may be (> ``size``); None:
            no bound.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid; 0 (torchvision keeps them all): only those with nothing left
            inside (``min_visible=0.25``: the rule before 2026-12-07).
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"`` (Pillow's filters).

    Raises:
        UserError: A ``size`` that is not positive, a ``max_size`` with ``size=(h, w)`` or not
            above ``size``, a ``min_visible`` outside [0, 1], or an unknown ``interpolation``.
    """

    def __init__(self, size: int | Sequence[int], max_size: int | None = None,
                 min_visible: float = 0.0, interpolation: str = "bilinear") -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.shorter: int | None = None
        if isinstance(size, int) and not isinstance(size, bool):
            if size < 1:
                raise UserValueError(f"{self.name}: size must be positive, got {size}")
            self.shorter = size
            self.size = None
        else:
            self.size = pair(size, "size", self.name)
            if max_size is not None:
                raise UserValueError(f"{self.name}: max_size applies only to Resize(int) (the "
                                     f"shorter side), got size={size!r}")
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)
                                     or max_size <= (self.shorter or 0)):
            raise UserValueError(f"{self.name}: max_size must be an int > size, got {max_size!r}")
        self.max_size = max_size
        self.min_visible = check_min_visible(min_visible, self.name)

    def windows(self, sizes: np.ndarray, u: np.ndarray | None) -> Params:
        if self.shorter is None:  # a plain box: the whole image
            assert self.size is not None
            whole = np.concatenate([np.zeros((len(sizes), 2), np.int64), sizes], axis=1)
            return box_params(whole, self.size)
        full = shorter_side_sizes(sizes, self.shorter, self.max_size)
        return window_params(sizes, full, np.zeros_like(full), full)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        if self.shorter is None:
            return super(_WindowCrop, self).output_size(sizes, params)
        return shorter_side_sizes(np.asarray(sizes, np.int64).reshape(-1, 2), self.shorter,
                                  self.max_size)


class CenterCrop(_WindowCrop):
    """torchvision's ``CenterCrop``: ``size`` out of the centre of each valid image at its
    offsets; a side shorter than the crop is padded with 0 (as torchvision does).

    Args:
        size: The output (height, width), or one int for both.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid; 0 (torchvision keeps them all): only those with nothing left
            inside (``min_visible=0.25``: the rule before 2026-12-07).

        interpolation: the filter of the pixels a window resamples (Pillow's ``"bilinear"``,
            ``"bicubic"`` or ``"lanczos"``; a crop at scale 1 copies pixels whatever it is).

    Raises:
        UserError: A ``size`` that is not positive ints, a ``min_visible`` outside [0, 1], or
            an unknown ``interpolation``.
    """

    size: tuple[int, int]

    def __init__(self, size: int | Sequence[int], min_visible: float = 0.0,
                 interpolation: str = "bilinear") -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.size = pair(size, "size", self.name)
        self.min_visible = check_min_visible(min_visible, self.name)

    def windows(self, sizes: np.ndarray, u: np.ndarray | None) -> Params:
        crop = np.broadcast_to(np.asarray(self.size, np.int64), sizes.shape)
        offsets = center_offsets(sizes, crop)
        if not (crop > sizes).any():  # no padding: a plain box of the stored pixels
            return box_params(np.concatenate([offsets, crop], axis=1), self.size)
        return window_params(sizes, sizes, offsets, crop)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        return super(_WindowCrop, self).output_size(sizes, params)


class ResizeCenterCrop(_WindowCrop):
    """torchvision's ``Resize(resize_size)`` then ``CenterCrop(size)`` (the evaluation preset),
    to the pixel: the shorter side resized to ``resize_size``, the longer truncated in
    proportion, then the centre crop (0 padding where the resized image is smaller than the
    crop).

    Args:
        size: The output (height, width), or one int for both.
        resize_size: The shorter side after the resize; default the crop's shorter side.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"`` (Pillow's filters).

    Raises:
        UserError: A ``size`` or ``resize_size`` that is not positive ints, a
            ``min_visible`` outside [0, 1], or an unknown ``interpolation``.
    """

    def __init__(self, size: int | Sequence[int], resize_size: int | None = None,
                 min_visible: float = 0.25, interpolation: str = "bilinear") -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.size = pair(size, "size", self.name)
        if resize_size is None:
            resize_size = min(self.size)
        if isinstance(resize_size, bool) or not isinstance(resize_size, int) or resize_size < 1:
            raise UserValueError(f"{self.name}: resize_size must be a positive int (the shorter "
                                 f"side after the resize), got {resize_size!r}")
        self.resize_size = resize_size
        self.min_visible = check_min_visible(min_visible, self.name)

    def windows(self, sizes: np.ndarray, u: np.ndarray | None) -> Params:
        full = shorter_side_sizes(sizes, self.resize_size)
        crop = np.broadcast_to(np.asarray(self.size, np.int64), sizes.shape)
        return window_params(sizes, full, center_offsets(full, crop), crop.copy())


class ResizeCrop(_WindowCrop):
    """Resize each image to cover its target, then crop the target: SDXL's bucketed resize.

    Args:
        size: the target ``(height, width)`` (an int: square); ``None``: each sample's
            aspect-ratio bucket (``BucketBatchSampler`` puts one bucket in each batch).
        crop: ``"center"`` (torchvision's ``CenterCrop`` offsets) or ``"random"`` (a uniform
            offset per sample, keyed like every draw).
        buckets: the buckets of ``size=None``: None (default) takes the DataLoader's
            ``BucketBatchSampler``'s (SDXL's list without one); ``"sdxl"``, ``"kohya"``, a
            ``npu_data.Buckets`` or a list of ``(height, width)`` must then equal the
            sampler's (the DataLoader refuses other buckets when it is built).
        min_visible: geometry keeping less of its area becomes invalid.
        no_upscale: with ``buckets`` given, a photo smaller than its bucket gets one inside
            it (kohya's ``bucket_no_upscale``; the sampler's own setting otherwise).
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"`` (Pillow's filters;
            diffusers' SDXL scripts use Lanczos).

    Raises:
        UserError: a ``size`` that is not positive ints, an unknown ``crop``, ``buckets`` or
            ``interpolation``, or a ``min_visible`` outside [0, 1].

    The resize: scale ``max(th / h, tw / w)``; the side that sets it becomes its target
    exactly, the other ``max(t, round_half_up(side * scale))`` (integers); Pillow BILINEAR
    (antialiased) on the whole image, then the ``th x tw`` window — exactly Pillow's resize
    followed by the crop.
    """

    traits = frozenset({Trait.CROP, Trait.FILLS})  # the resize covers the target

    def __init__(self, size: int | Sequence[int] | None = None, crop: str = "center",
                 buckets: BucketSpec | None = None, min_visible: float = 0.25,
                 no_upscale: bool = False, interpolation: str = "bilinear") -> None:
        self.interpolation = check_interpolation(interpolation, self.name)
        self.size = None if size is None else pair(size, "size", self.name)
        if crop not in ("center", "random"):
            raise UserValueError(f"{self.name}: crop must be 'center' or 'random', got {crop!r}")
        self.crop = crop
        self.given: Buckets | None = None if buckets is None else buckets_of(
            buckets, no_upscale=bool(no_upscale), who=self.name)
        self.rule: Buckets = self.given or Buckets(SDXL, bool(no_upscale), name="'sdxl'")
        self.random_draws = 2 if crop == "random" else 0
        self.min_visible = check_min_visible(min_visible, self.name)

    @property
    def buckets(self) -> tuple[tuple[int, int], ...]:
        """The buckets of ``size=None``."""
        return self.rule.sizes

    def take_buckets(self, rule: Buckets, who: str) -> None:
        """Use ``rule`` (the batch sampler's): refused when this crop was given others."""
        if self.given is not None and not self.given.same(rule):
            raise UserValueError(
                f"{self.name}(size=None) was built with {self.given.describe()} but the {who} "
                f"batches by {rule.describe()} — give both the same buckets, or none here "
                "(buckets=None; NpuPreprocessor(buckets='sampler')): it takes the sampler's")
        self.rule = rule

    def targets(self, sizes: np.ndarray) -> np.ndarray:
        """Each sample's target (B, 2): ``size``, or its bucket."""
        if self.size is not None:
            return np.broadcast_to(np.asarray(self.size, np.int64), sizes.shape).copy()
        return self.rule.targets(sizes)

    def windows(self, sizes: np.ndarray, u: np.ndarray | None) -> Params:
        targets = self.targets(sizes)
        if len(targets) and not (targets == targets[0]).all():
            found = sorted({tuple(int(v) for v in t) for t in targets})
            raise UserError(f"{self.name}(size=None): the samples of one batch fall in "
                            f"different buckets {found} — batch them with "
                            "npu_data.BucketBatchSampler (one bucket per batch) or give size=")
        full = cover_sizes(sizes, targets)
        if u is None:
            offsets = center_offsets(full, targets)
        else:
            room = full - targets
            offsets = np.minimum(np.floor(u[:, :2] * (room + 1)), room).astype(np.int64)
        return window_params(sizes, full, offsets, targets)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        return self.targets(np.asarray(sizes, np.int64).reshape(-1, 2))

