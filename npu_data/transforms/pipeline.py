"""The pipeline the loaders hold: the user's keyed transform, built once, seen from a loader.

A loader calls two of its functions per batch, and nothing else of ``transforms``:

- :meth:`Pipeline.draw` where the batch's samples are known (the index sampler, or where a
  stream reads): its ``BatchRequest`` — the whole pipeline's keyed parameters drawn once from
  the stored sizes and, when the reader crops, the leading crop's ``CropPlan`` (the pixels
  each window reads included, :func:`read_regions`);
- :meth:`Pipeline.finish` after the read (in the main process after the copy, or in the
  assembler, ``loaders.placement``): the rest of the pipeline with the request's parameters.

Between the two the reader applies the plan (``npu_data.readers.read_crop``): the crop at
read is reader code, the transforms say which crop it is. Every sample's crop parameters are
a pure function of (seed, epoch, sample id) and of its stored size (``transforms.draws``), so
a reader knows each crop box before it reads a pixel. A transform says which leading crop a
reader may apply (``compose.split``: a crop alone, or the first stage of a keyed
``Compose``) and runs what is left after it (:func:`apply_after_read`); :class:`ReadCrop` is
that crop for one pass, its :meth:`ReadCrop.draw_plan` the batch's whole keyed parameters
drawn once and its ``CropPlan`` taken out of them (plain data: boxes, windows, output size),
one plan type whatever the source — a memory map, a JPEG region, a tar stream. The bytes are
those of running the whole transform on the full batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from npu_data.batch import Batch, BatchRequest, CropPlan
from npu_data.transforms import _dispatch, draws
from npu_data.transforms._kernels.crop import window_regions
from npu_data.transforms.base import CropParams, Params, Trait, Transform, donating
from npu_data.transforms.compose import Rest, Split, split
from npu_data.transforms.crop import out_shape

__all__ = ["Pipeline", "ReadCrop", "apply_after_read", "decodes_regions", "read_regions"]


class Pipeline:
    """A keyed transform as the loaders run it (module doc).

    Attributes:
        transform: the user's transform (keyed: its parameters are drawn per sample).
        crop: the leading crop a reader may apply (None: it has none).
    """

    def __init__(self, transform: Transform) -> None:
        self.transform = transform
        self.crop = ReadCrop.of(transform)

    @classmethod
    def of(cls, transform: Any) -> Pipeline | None:
        """The pipeline of ``transform`` when its parameters are drawn per sample, else None."""
        return cls(transform) if isinstance(transform, Transform) and transform.keyed else None

    def draw(self, indices: Sequence[int], ids: np.ndarray, sizes: np.ndarray,
             seed: int, epoch: int, *, crop: bool = False, fast: bool = False,
             bucket: int | None = None, placed: bytes | None = None) -> BatchRequest:
        """The request of the samples ``indices`` whose augmentation keys are ``ids`` (dataset
        indices or ``draws.string_ids``) and stored images ``sizes (B, 2)``, in the pass of
        ``seed`` and ``epoch``; ``crop``: the reader applies the leading crop (``fast``: a
        JPEG box may decode DCT-scaled); ``bucket`` and ``placed`` travel as they are."""
        plan = None
        if crop and self.crop is not None:
            drawn, plan = self.crop.at(seed, epoch, fast).draw_plan(sizes, ids)
            # what a JPEG decodes: the windows' pixels, in regions where the kernels allow
            plan = replace(plan, regions=read_regions(plan),
                           decode_regions=decodes_regions(torch.empty(0, dtype=torch.int64)))
            params = {k: v.numpy() for k, v in drawn.items()}
        else:
            keys = draws.sample_keys(seed, epoch, ids)
            params = {k: v.numpy() for k, v in self.transform.draw_keyed(sizes, keys).items()}
        return BatchRequest(tuple(int(i) for i in indices), ids, seed, epoch, bucket, params,
                            plan, placed)

    def draw_for(self, batch: Mapping[str, Any], seed: int, epoch: int, *, crop: bool = False,
                 fast: bool = False) -> BatchRequest | None:
        """The request of a batch assembled without one (a stream's, a list of samples):
        drawn from its ``sizes`` and its ``index`` or ``__key__`` column; None when it has
        neither."""
        ids = sample_ids(batch)
        sizes = batch.get("sizes")
        if ids is None or not isinstance(sizes, torch.Tensor):
            return None
        return self.draw(range(len(ids)), ids, sizes.numpy(), seed, epoch, crop=crop,
                         fast=fast)

    def finish(self, batch: Batch, request: BatchRequest, cropped: bool,
               donate: bool = False) -> Batch:
        """The pipeline on a batch read for ``request`` (after the reader's crop when
        ``cropped``): the rest of it with the request's parameters; ``donate``: the batch is
        the loader's alone, the kernels may write into its image."""
        params: Params = {k: torch.from_numpy(v) for k, v in (request.params or {}).items()}
        with donating(batch.get("image") if donate else None):
            return dict(apply_after_read(self.transform, batch, params, cropped))


def sample_ids(batch: Mapping[str, Any]) -> np.ndarray | None:
    """The batch's sample ids: its ``index`` column, else hashes of its ``__key__`` strings."""
    index = batch.get("index")
    if isinstance(index, torch.Tensor) and index.ndim == 1 and not index.is_floating_point():
        return index.numpy().astype(np.int64)
    names = batch.get("__key__")
    if isinstance(names, (list, tuple)) and names and all(isinstance(k, str) for k in names):
        return draws.string_ids(list(names))
    return None


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

