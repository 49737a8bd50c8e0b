"""The pipelines of the crop-at-read tests (every store and source reads them the same)."""

from __future__ import annotations

from typing import Any

from npu_data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ResizeCenterCrop,
    ResizeCrop,
)


def crop_pipeline(kind: str) -> Any:
    """The pipeline ``kind`` names, each led by a crop the loaders can apply at read."""
    if kind == "rrc":
        return RandomResizedCrop(24, scale=(0.05, 1.0))
    if kind == "resize":
        return Compose([Resize((20, 30)), RandomHorizontalFlip()])
    if kind == "center":
        return Compose([CenterCrop(40), ColorJitter(0.4, 0.4, 0.4, 0.1)])
    if kind == "resize_crop":  # windows of the whole resize (transforms.crop)
        return Compose([ResizeCrop((24, 32), crop="random"), RandomHorizontalFlip()])
    if kind == "resize_center":
        return ResizeCenterCrop((30, 44), resize_size=30)
    if kind == "resize_int":  # each sample its own size, padded
        return Resize(20)
    if kind == "resize_int_jitter":  # padded: contrast's mean must skip the padding
        return Compose([Resize(20), ColorJitter(0.4, 0.4, 0.4, 0.1)])
    if kind == "center_pad":  # torchvision pads what the crop leaves
        return CenterCrop((40, 200))
    return Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])
