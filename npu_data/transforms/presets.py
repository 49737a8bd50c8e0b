"""NpuPreprocessor: the augmentation presets the article promised, as one Compose."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from npu_data.errors import UserError
from npu_data.transforms.base import Transform, pair
from npu_data.transforms.color import ColorJitter
from npu_data.transforms.compose import Compose
from npu_data.transforms.crop import RandomResizedCrop, ResizeCenterCrop
from npu_data.transforms.flip import RandomHorizontalFlip
from npu_data.transforms.normalize import IMAGENET_MEAN, IMAGENET_STD, Normalize

LEVELS = {
    0: "resize the shorter side to image_size, centre crop (evaluation)",
    1: "RandomResizedCrop + RandomHorizontalFlip",
    2: "level 1 + ColorJitter(0.2, 0.2, 0.2)",
    3: "level 1 + ColorJitter(0.4, 0.4, 0.4, hue=0.1)",
}


def preset(
    image_size: int | Sequence[int], augment_level: int, min_visible: float = 0.25
) -> list[Transform]:
    """The uint8 transforms of ``augment_level`` (see ``LEVELS``)."""
    size = pair(image_size, "image_size", "NpuPreprocessor")
    if isinstance(augment_level, bool) or augment_level not in LEVELS:
        choices = "; ".join(f"{k}: {v}" for k, v in LEVELS.items())
        raise UserError(f"NpuPreprocessor: augment_level must be one of {choices}; got "
                        f"{augment_level!r}")
    if augment_level == 0:
        return [ResizeCenterCrop(size, min_visible=min_visible)]
    out: list[Transform] = [
        RandomResizedCrop(size, min_visible=min_visible),
        RandomHorizontalFlip(),
    ]
    if augment_level == 2:
        out.append(ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2))
    elif augment_level == 3:
        out.append(ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1))
    return out


class NpuPreprocessor(Compose):
    """``NpuPreprocessor(image_size=1024, augment_level=2)``: a ready-made batched pipeline.

    ``normalize``: False (uint8 out), True (ImageNet mean/std) or ``(mean, std)``;
    ``dtype`` / ``channels_last`` apply to the normalised output.
    """

    name = "NpuPreprocessor"

    def __init__(
        self,
        image_size: int | Sequence[int] = 224,
        augment_level: int = 1,
        normalize: bool | tuple[Sequence[float], Sequence[float]] = False,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
        min_visible: float = 0.25,
    ) -> None:
        transforms = preset(image_size, augment_level, min_visible)
        if normalize is True:
            transforms.append(Normalize(IMAGENET_MEAN, IMAGENET_STD, dtype, channels_last))
        elif normalize is not False and normalize is not None:
            try:
                mean, std = normalize
            except (TypeError, ValueError):
                raise UserError(
                    "NpuPreprocessor: normalize must be True, False or (mean, std)"
                ) from None
            transforms.append(Normalize(mean, std, dtype, channels_last))
        super().__init__(transforms)
        self.image_size = pair(image_size, "image_size", self.name)
        self.augment_level = augment_level
