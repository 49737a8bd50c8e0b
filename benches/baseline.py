"""The baseline pipeline: JPEG files, Pillow decode and per-sample CPU augmentation.

Each sample runs the CPU reference of the same ``Compose`` (each transform's
``apply_reference``, Pillow semantics) with its own parameters, inside a plain
``torch.utils.data.DataLoader`` — the usual PIL-path training input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image


def augmentation(crop: int = 224) -> Any:
    """RandomResizedCrop(crop) + ColorJitter(0.4, 0.4, 0.4, 0.1) + RandomHorizontalFlip()."""
    from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

    return Compose([RandomResizedCrop(crop), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def image_files(export_root: Path) -> list[Path]:
    """The JPEGs of a generated project, in task order."""
    return sorted((export_root / "images").glob("*.jpg"))


class JpegReference(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Decode one JPEG with Pillow and augment it alone on the CPU (seeded by index+epoch)."""

    def __init__(self, files: list[Path], crop: int = 224) -> None:
        self.files = list(files)
        self.crop = crop
        self.augment = augmentation(crop)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.files[i]) as im:
            img = np.array(im.convert("RGB"))
        g = torch.Generator().manual_seed(i * 7919 + self.epoch)
        for t in self.augment.transforms:
            one = {"image": torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None],
                   "sizes": torch.tensor([img.shape[:2]])}
            img = t.apply_reference(img, t.get_params(one, g), 0)
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)


def loader(files: list[Path], batch_size: int, workers: int, crop: int = 224) -> Any:
    """The baseline torch DataLoader (shuffled, persistent workers when there are any)."""
    return torch.utils.data.DataLoader(
        JpegReference(files, crop), batch_size=batch_size, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0, prefetch_factor=4 if workers else None,
        generator=torch.Generator().manual_seed(0))
