"""The baseline users actually run: torchvision's v2 transforms on PIL images in a torch
DataLoader.

A ``torch.utils.data.Dataset`` opens one JPEG with Pillow (``convert("RGB")``), wraps its
rectangles as ``tv_tensors.BoundingBoxes`` and runs ``v2.Compose([RandomResizedCrop(crop),
ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(), PILToTensor(),
SanitizeBoundingBoxes()])`` — the detection recipe of torchvision's docs; the boxes follow the
crop and the flip, and the ones cropped away are dropped. The collate stacks the images and
pads the boxes like ``npu_data.bench.pillow_baseline.collate``. torchvision comes with the ``bench`` extra
(matched to the installed torch); without it the suite's baseline is the per-sample Pillow
reference (``npu_data.bench.pillow_baseline``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from npu_data.bench import pillow_baseline as baseline

LABEL = "baseline: torchvision v2 on PIL images (CPU)"


def unavailable() -> str | None:
    """Why torchvision cannot run here (None when it can)."""
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision not installed (pip install 'npu-data[bench]')"
    try:
        import torchvision.transforms.v2  # noqa: F401
    except Exception as exc:  # e.g. a build for another torch ("operator ... does not exist")
        return f"torchvision does not import: {str(exc).splitlines()[0][:120]}"
    return None


def transforms(crop: int = 224) -> Any:
    """RandomResizedCrop + ColorJitter(0.4, 0.4, 0.4, 0.1) + flip, boxes carried along."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(crop, antialias=True),
                       v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.RandomHorizontalFlip(),
                       v2.PILToTensor(), v2.SanitizeBoundingBoxes()])


class TorchvisionJpeg(baseline.JpegDataset):
    """One JPEG through Pillow and torchvision's v2 transforms."""

    pipeline = staticmethod(transforms)

    def read(self, i: int) -> tuple[int, Path]:
        """Open the file (Pillow reads lazily: the bytes come with the decode)."""
        return i, self.files[i]

    def decode(self, item: tuple[int, Path]) -> tuple[int, Image.Image]:
        i, path = item
        with Image.open(path) as im:
            return i, im.convert("RGB")

    def augment(self, item: tuple[int, Image.Image]) -> dict[str, Any]:
        from torchvision import tv_tensors

        i, im = item
        t = self.boxes[i]
        target = {"boxes": tv_tensors.BoundingBoxes(torch.from_numpy(t.xyxy), format="XYXY",
                                                    canvas_size=(im.height, im.width)),
                  "labels": torch.from_numpy(t.label)}
        image, target = self.augmentation(im, target)
        return {"image": image, "boxes.xyxy": target["boxes"].as_subclass(torch.Tensor),
                "boxes.label": target["labels"]}


def loader(files: list[Path], batch_size: int, workers: int, crop: int = 224,
           export: Path | None = None, pin_memory: bool = False) -> Any:
    """The torchvision DataLoader (``pillow_baseline.loader`` of ``TorchvisionJpeg``)."""
    return baseline.loader(files, batch_size, workers, crop, export, pin_memory,
                           dataset=TorchvisionJpeg)
