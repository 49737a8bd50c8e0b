"""Crop at read: a keyed pipeline's leading crop, applied by whoever reads the images.

Every sample's crop parameters are a pure function of (seed, epoch, sample id) and of its
stored size (``transforms.draws``), so a reader knows each crop box before it reads a pixel.
A transform says which leading crop a reader may apply (``compose.split``: a
crop alone, or the first stage of a keyed ``Compose``) and runs what is left after it
(:func:`apply_after_read`). :class:`ReadCrop` is that crop for one pass; its
:meth:`ReadCrop.draw` draws a batch's whole keyed parameters once and
:meth:`ReadCrop.plan_from` takes the batch's ``CropPlan`` out of them (plain data: boxes,
windows, output size), one plan type whatever the source — a memory map, a JPEG region, a
tar stream.
:func:`crop_geometry` moves a collated batch's geometry keys through a plan and
:func:`resize_into` resizes each image's box straight into the batch buffer
(``functional.resized_crop_list``). The values are those of collating the full images and
running the crop after: the same kernel on the same pixels.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from npu_data.batch import CropPlan
from npu_data.transforms import _dispatch, draws, geometry
from npu_data.transforms import functional as F
from npu_data.transforms._kernels.crop import window_regions
from npu_data.transforms.base import Batch, CropParams, Params, Trait, Transform
from npu_data.transforms.compose import Rest, Split, split
from npu_data.transforms.crop import (
    effective_boxes,
    micro_conditioning,
    out_shape,
)

__all__ = ["ReadCrop", "apply_after_read", "crop_geometry", "decodes_regions", "read_regions", "resize_into"]


@dataclass(frozen=True)
class ReadCrop:
    """The leading crop of a keyed transform, for a reader, in one pass.

    Attributes:
        crop: the crop stage (``Trait.CROP``: ``RandomResizedCrop``, ``Resize``,
            ``CenterCrop``, ``ResizeCenterCrop``, ``ResizeCrop`` or a user's crop), read
            through :attr:`size`, :attr:`min_visible` and :attr:`interpolation`.
        position: its draw position in the transform (``draws.child_position``).
        seed: the loader's seed.
        epoch: the pass's augmentation epoch (repeats included).
        fast: JPEG boxes at least twice the output may decode DCT-scaled (not exact).
        pipeline: the keyed pipeline whose leading crop ``crop`` is (``compose.split``);
            None: the crop alone.
        lead: how the pipeline splits there (the crop's stage, a flip written before it).
    """

    crop: Transform
    position: int = 0
    seed: int = 0
    epoch: int = 0
    fast: bool = False
    pipeline: Transform | None = None
    lead: Split | None = None

    @classmethod
    def of(cls, transform: Any, fast: bool = False, seed: int = 0, epoch: int = 0
           ) -> ReadCrop | None:
        """The crop a reader may apply for ``transform`` (None: none, e.g. not keyed) in the
        pass of ``seed`` and ``epoch``."""
        lead = split(transform)
        if lead is None or Trait.CROP not in lead.crop.traits:
            return None
        whole = transform if lead.crop is not transform else None
        return cls(lead.crop, lead.position, int(seed), int(epoch), bool(fast), whole, lead)

    @property
    def size(self) -> tuple[int, int] | None:
        """The crop's output (height, width); None: per batch, from its parameters."""
        size: tuple[int, int] | None = getattr(self.crop, "size", None)
        return size

    @property
    def min_visible(self) -> float:
        """The crop's geometry rule (``RandomResizedCrop``'s argument; 0: keep all)."""
        return float(getattr(self.crop, "min_visible", 0.0))

    @property
    def interpolation(self) -> str:
        """The crop's resize filter (``"bilinear"`` unless it says otherwise)."""
        return str(getattr(self.crop, "interpolation", "bilinear"))

    def at(self, seed: int, epoch: int, fast: bool | None = None) -> ReadCrop:
        """This crop in the pass of ``seed`` and ``epoch`` (``fast`` kept when None)."""
        return replace(self, seed=int(seed), epoch=int(epoch),
                       fast=self.fast if fast is None else bool(fast))

    def draw(self, sizes: np.ndarray, ids: np.ndarray | Sequence[Any]) -> Params:
        """The whole keyed transform's parameters (the pipeline's, or the crop's alone) for
        the samples ``ids`` (dataset indices or ``draws.string_ids``) whose stored images
        are ``sizes (B, 2)``: what the loader applies, drawn once."""
        keys = draws.sample_keys(self.seed, self.epoch, ids)
        if self.pipeline is None:
            return self.crop.draw_keyed(sizes, keys, self.position)
        return self.pipeline.draw_keyed(sizes, keys)

    def plan(self, sizes: np.ndarray, ids: np.ndarray | Sequence[Any]) -> CropPlan:
        """The crop of the samples ``ids`` whose stored images are ``sizes (B, 2)``."""
        return self.plan_from(self.draw(sizes, ids), sizes)

    def draw_plan(self, sizes: np.ndarray, ids: np.ndarray | Sequence[Any]
                  ) -> tuple[Params, CropPlan]:
        """:meth:`draw` and the crop's plan out of it: the crop drawn once."""
        params = self.draw(sizes, ids)
        return params, self.plan_from(params, sizes)

    def plan_from(self, params: Params, sizes: np.ndarray) -> CropPlan:
        """The crop of a batch of stored ``sizes (B, 2)`` whose whole keyed parameters are
        ``params`` (:meth:`draw`; a flip written before the crop runs after it, the crop's
        window mirrored: ``compose.Split.read_params``); a window never decodes DCT-scaled
        (its coefficients are those of the whole image)."""
        if self.pipeline is not None:  # the crop's own, out of the whole pipeline's draw
            lead = self.lead if self.lead is not None else Split(self.crop, self.position,
                                                                 Rest())
            params = lead.read_params(params, True, np.asarray(sizes, np.int64).reshape(-1, 2))
        shape = out_shape(params, self.size)
        crop = CropParams.of(params)

        def host(v: torch.Tensor | None) -> np.ndarray | None:
            return None if v is None else np.ascontiguousarray(np.asarray(v), dtype=np.int64)

        boxes = host(crop.boxes)
        assert boxes is not None
        return CropPlan(boxes, shape, self.min_visible,
                        self.fast and crop.windows is None, host(crop.windows), host(crop.out),
                        host(crop.top_left), self.seed, self.epoch, self.interpolation)


def apply_after_read(transform: Transform, batch: Batch, params: Params, cropped: bool) -> Batch:
    """``transform`` on a batch read with ``params``.

    Args:
        transform: The keyed transform the parameters were drawn for.
        batch: The batch as read (its leading crop applied when ``cropped``).
        params: The whole transform's keyed parameters (:meth:`ReadCrop.draw`).
        cropped: Whether the reader applied the leading crop.

    Returns:
        The batch through what is left after the leading crop when the reader applied it,
        else through the whole transform.
    """
    lead = split(transform) if cropped else None
    return transform.apply(batch, params) if lead is None else lead.rest.apply(batch, params)


def plan_params(plan: CropPlan) -> Params:
    """A ``CropPlan``'s parameters as the host tensors the crop's ``apply`` takes."""
    def host(v: np.ndarray | None) -> torch.Tensor | None:
        return None if v is None else torch.from_numpy(np.ascontiguousarray(v, np.int64))

    boxes = host(plan.boxes)
    assert boxes is not None
    return CropParams(boxes, host(plan.windows), host(plan.out), host(plan.top_left)
                      ).as_params()


def crop_geometry(batch: Batch, plan: CropPlan) -> Batch:
    """A batch collated at the stored sizes, its geometry through the plan's crop.

    Args:
        batch: The collated batch (``sizes``: the stored sizes; geometry keys of the kinds).
        plan: The crop every sample gets (:meth:`ReadCrop.plan`).

    Returns:
        The batch with its geometry keys through the crop, ``sizes`` the output size and the
        micro-conditioning keys the crop writes (``transforms.crop``); ``image`` as it
        was.
    """
    out = dict(batch)
    params = plan_params(plan)
    effective = effective_boxes(params, plan.size)
    out.update(geometry.resized_crop_geometry(batch, effective, plan.size, plan.min_visible))
    top_left, target = micro_conditioning(params, batch["sizes"], plan.size)
    original = batch.get("original_size")  # the photo's, where the dataset recorded it
    out["original_size"] = (original if isinstance(original, torch.Tensor)
                            else batch["sizes"].to(torch.int64).clone())
    out["crop_top_left"], out["target_size"] = top_left, target
    # a real (B, 2) tensor, not an expanded view: a pinned copy cannot be made of one whose
    # elements share memory (torch's pin-memory thread raises)
    out["sizes"] = target.clone()
    return out


def read_regions(plan: CropPlan) -> np.ndarray | None:
    """The pixels of each image a window plan reads (a JPEG decodes only these).

    Args:
        plan: The batch's crop plan.

    Returns:
        ``(B, 4)`` (top, left, height, width), ``(0, 0, 1, 1)`` for a window wholly in the
        padding; None for a plan of boxes (read the boxes themselves).
    """
    if plan.windows is None:
        return None
    regions = window_regions(plan.boxes, plan.windows, plan.size[0], plan.size[1],
                             plan.interpolation)
    regions[(regions[:, 2] < 1) | (regions[:, 3] < 1)] = (0, 0, 1, 1)
    return regions


def decodes_regions(t: torch.Tensor) -> bool:
    """Whether a reader decodes JPEG regions for host tensors like ``t``.

    Args:
        t: A tensor on the device the batch will be resized on.

    Returns:
        True where the compiled CPU kernels run (with the torch kernels forced, a reader
        decodes whole images, as their reference does).
    """
    return _dispatch.compiled_for(t)


def resize_into(images: Sequence[np.ndarray], boxes: torch.Tensor, out: torch.Tensor,
                windows: np.ndarray | None = None, interpolation: str = "bilinear"
                ) -> torch.Tensor:
    """Each array's box resized into its row of ``out``.

    Args:
        images: ``(H, W, 3)`` uint8 arrays (memory-map views or decoded regions).
        boxes: ``(B, 4)`` the plan's boxes, moved to each array's origin where only a region
            was read.
        out: ``(B, 3, h, w)`` uint8, written.
        windows: The plan's windows (whole resizes kept in part), or None.
        interpolation: The plan's resize filter.

    Returns:
        ``out``.
    """
    if not len(images):
        return out
    with warnings.catch_warnings():  # memory-map views are read-only; nothing writes them
        warnings.simplefilter("ignore", UserWarning)
        tensors = [torch.from_numpy(im) for im in images]
    win = None if windows is None else torch.from_numpy(np.ascontiguousarray(windows))
    return F.resized_crop_list(tensors, boxes, out, win, interpolation=interpolation)

