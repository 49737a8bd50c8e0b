"""Batched on-device augmentation with per-sample random parameters.

Pure kernels live in :mod:`~npu_data.transforms.functional` (each op dispatches once, in
``_dispatch``, to the compiled CPU kernels or the torch ones) and
:mod:`~npu_data.transforms.oracle.pillow` (Pillow, per sample); geometry companions in
:mod:`~npu_data.transforms.geometry`; the random transforms below draw per-sample parameters
(on the batch's device, or keyed on the host) and apply them through ``functional``,
geometry included; :mod:`~npu_data.transforms.pipeline` is the keyed pipeline as the loaders
hold it (``Pipeline``: the batch's request drawn, the rest run after the read) and says which
leading crop a reader may apply while it reads the images (``ReadCrop``; the reader's part is
``npu_data.readers.read_crop``). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from npu_data.transforms import functional, geometry
from npu_data.transforms.auto_augment import AutoAugment, RandAugment, TrivialAugmentWide
from npu_data.transforms.base import CropParams, Trait, Transform
from npu_data.transforms.captions import CaptionDropout, RandomCaption
from npu_data.transforms.color import ColorJitter
from npu_data.transforms.compose import Compose
from npu_data.transforms.containers import RandomApply, RandomChoice, RandomOrder
from npu_data.transforms.crop import RandomResizedCrop
from npu_data.transforms.detection import RandomIoUCrop, RandomZoomOut, ScaleJitter
from npu_data.transforms.draws import sample_params
from npu_data.transforms.fixed_crop import FixedSizeCrop
from npu_data.transforms.flip import RandomHorizontalFlip
from npu_data.transforms.latents import LatentCaptionDropout, RandomLatentFlip
from npu_data.transforms.mixing import CutMix, MixUp
from npu_data.transforms.normalize import Normalize
from npu_data.transforms.oracle.replay import replay_reference, sample_image
from npu_data.transforms.pipeline import ReadCrop
from npu_data.transforms.pixel_ops import (
    GaussianBlur,
    RandomErasing,
    RandomGrayscale,
    RandomPhotometricDistort,
)
from npu_data.transforms.presets import LEVELS, NpuPreprocessor
from npu_data.transforms.resize import CenterCrop, Resize, ResizeCenterCrop, ResizeCrop
from npu_data.transforms.sanitize import SanitizeBoundingBoxes
from npu_data.transforms.warp_ops import RandomAffine, RandomRotation, RandomVerticalFlip

if TYPE_CHECKING:  # what type checkers and the API reference see (the same names as _LAZY)
    from npu_data.transforms.oracle import measures as parity
    from npu_data.transforms.oracle import pillow as reference
    from npu_data.transforms.oracle.measures import ParityReport, compare_tensor

_LAZY = {
    "reference": ("npu_data.transforms.oracle.pillow", None),
    "parity": ("npu_data.transforms.oracle.measures", None),
    "compare_tensor": ("npu_data.transforms.oracle.measures", "compare_tensor"),
    "ParityReport": ("npu_data.transforms.oracle.measures", "ParityReport"),
}

__all__ = [
    "LEVELS",
    "AutoAugment",
    "CaptionDropout",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "CropParams",
    "CutMix",
    "FixedSizeCrop",
    "GaussianBlur",
    "MixUp",
    "LatentCaptionDropout",
    "Normalize",
    "NpuPreprocessor",
    "ParityReport",
    "RandomAffine",
    "RandomApply",
    "RandomChoice",
    "RandAugment",
    "RandomCaption",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomIoUCrop",
    "RandomPhotometricDistort",
    "RandomLatentFlip",
    "RandomOrder",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomVerticalFlip",
    "RandomZoomOut",
    "ReadCrop",
    "Resize",
    "ResizeCenterCrop",
    "ResizeCrop",
    "SanitizeBoundingBoxes",
    "ScaleJitter",
    "Trait",
    "Transform",
    "TrivialAugmentWide",
    "compare_tensor",
    "functional",
    "geometry",
    "parity",
    "reference",
    "replay_reference",
    "sample_image",
    "sample_params",
]


def __getattr__(name: str) -> Any:
    spec = _LAZY.get(name)
    if spec is None:
        raise AttributeError(f"module 'npu_data.transforms' has no attribute {name!r}")
    module = importlib.import_module(spec[0])
    value = module if spec[1] is None else getattr(module, spec[1])
    globals()[name] = value
    return value
