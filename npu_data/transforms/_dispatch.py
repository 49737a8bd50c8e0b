"""The one place a kernel picks its implementation (torchvision v2's kernel registry, keyed by
backend instead of input type).

Each op of :mod:`npu_data.transforms.functional` has a torch implementation
(``transforms/_kernels``: CUDA, NPU, meta, and the CPU without a compiler) and may have a
compiled CPU one (``transforms/_native/backend.py``), with the same signature. :func:`kernel`
returns the compiled one for CPU tensors when the library loads and is not switched off
(``_native.disabled()``, ``_kernels.accelerator_path()``, ``NPU_DATA_NATIVE=0``), else the
torch one. ``functional`` validates arguments, then makes exactly one :func:`kernel` call per op;
transforms draw parameters and call ``functional``; nothing else asks which backend runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from npu_data.transforms import _native
from npu_data.transforms._kernels import (
    blur,
    color,
    crop,
    jitter,
    layout,
    mixing,
    pixel,
    warp,
)
from npu_data.transforms._native import augment as compiled_augment
from npu_data.transforms._native import backend as compiled

COMPILED, TORCH = "compiled", "torch"


@dataclass(frozen=True)
class Kernel:
    """An op's implementations; ``compiled_takes`` narrows the compiled one's inputs."""

    torch_ops: Callable[..., Any]
    compiled: Callable[..., Any] | None = None
    compiled_takes: Callable[[torch.Tensor], bool] | None = None


def _uint8(t: torch.Tensor) -> bool:
    return t.dtype == torch.uint8


def _uint8_or_float32(t: torch.Tensor) -> bool:
    return t.dtype in (torch.uint8, torch.float32)


TABLE: dict[str, Kernel] = {
    "resized_crop": Kernel(crop.resized_crop, compiled.resized_crop),
    # a reader's images of different sizes (crop at read, ``readers.read_crop``)
    "resized_crop_list": Kernel(crop.resized_crop_list, compiled.resized_crop_list),
    "hflip": Kernel(layout.hflip, compiled.hflip),
    "adjust_brightness": Kernel(jitter.adjust_brightness, compiled.adjust_brightness),
    "adjust_contrast": Kernel(jitter.adjust_contrast, compiled.adjust_contrast),
    "adjust_saturation": Kernel(jitter.adjust_saturation, compiled.adjust_saturation),
    "adjust_hue": Kernel(jitter.adjust_hue, compiled.adjust_hue),
    "adjust_hue_direct": Kernel(color.adjust_hue_direct),  # a host reference: torch only
    "color_jitter": Kernel(jitter.color_jitter, compiled.color_jitter),
    "normalize": Kernel(layout.normalize, compiled.normalize, compiled_takes=_uint8),
    # the augmentations: compiled per-pixel passes on the CPU, torch kernels elsewhere
    "rgb_to_grayscale": Kernel(pixel.rgb_to_grayscale, compiled_augment.rgb_to_grayscale),
    "erase": Kernel(pixel.erase, compiled_augment.erase),
    "erase_noise": Kernel(pixel.erase_noise),  # keyed noise for value="random": torch only
    "lut_op": Kernel(pixel.lut_op, compiled_augment.lut_op),
    "adjust_sharpness": Kernel(pixel.adjust_sharpness, compiled_augment.adjust_sharpness),
    "gaussian_blur": Kernel(blur.gaussian_blur, compiled_augment.gaussian_blur),
    "policy_step": Kernel(pixel.policy_step, compiled_augment.policy_step),
    "permute_channels": Kernel(mixing.permute_channels, compiled_augment.permute_channels),
    "choose": Kernel(mixing.choose, compiled_augment.choose),
    "mixup": Kernel(mixing.mixup, compiled_augment.mixup, compiled_takes=_uint8_or_float32),
    "cutmix": Kernel(mixing.cutmix, compiled_augment.cutmix),
    "soft_labels": Kernel(mixing.soft_labels, compiled_augment.soft_labels),
    # affine, rotate, pad and crop: host tables, then one pass over the pixels
    "warp": Kernel(warp.warp, compiled_augment.warp),
    "vflip": Kernel(warp.vflip, compiled_augment.vflip),
}


def compiled_for(t: torch.Tensor) -> bool:
    """Whether the compiled CPU kernels run for ``t`` (a CPU tensor, library loaded, on)."""
    return _native.for_tensor(t) is not None


def backend(op: str, images: torch.Tensor) -> str:
    """``COMPILED`` or ``TORCH``: the implementation of ``op`` that runs for ``images``."""
    k = TABLE[op]
    if k.compiled is not None and compiled_for(images) and (
            k.compiled_takes is None or k.compiled_takes(images)):
        return COMPILED
    return TORCH


def kernel(op: str, images: torch.Tensor) -> Callable[..., Any]:
    """The implementation of ``op`` for ``images``."""
    k = TABLE[op]
    return k.compiled if backend(op, images) == COMPILED else k.torch_ops  # type: ignore[return-value]
