"""Optional frameworks in the suite: Kornia (measured when installed), DALI and FFCV (listed).

Kornia runs the same augmentation as ``kornia.augmentation`` on our DataLoader's batches from
raw shards (same workers, same batches, boxes as ``bbox_xyxy``): images become float in
[0, 1], as Kornia expects. The bench images share one size, so the padded batch is the image.
Kornia moves boxes but neither clips them nor drops the ones cropped away (``boxes.valid`` is
passed through unchanged).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

FRAMEWORKS = (("kornia", "Kornia"), ("nvidia.dali", "NVIDIA DALI"), ("ffcv", "FFCV"))
MEASURED = frozenset({"kornia"})


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (a missing parent package counts as absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def status() -> list[dict[str, Any]]:
    """name, label, installed and (when not measured) the reason, per optional framework."""
    out = []
    for mod, label in FRAMEWORKS:
        name = mod.split(".")[-1]
        found = installed(mod)
        reason = None if found and name in MEASURED else (
            "installed, but this suite has no pipeline for it yet" if found else "not installed")
        out.append({"name": name, "label": label, "installed": found, "reason": reason})
    return out


def kornia_augmentation(crop: int) -> Callable[..., Any]:
    """A DataLoader transform: RandomResizedCrop + ColorJitter(0.4, 0.4, 0.4, 0.1) + flip
    with ``kornia.augmentation``, boxes carried as ``bbox_xyxy``."""
    import kornia.augmentation as K

    aug = K.AugmentationSequential(
        K.RandomResizedCrop((crop, crop)), K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=1.0),
        K.RandomHorizontalFlip(), data_keys=["input", "bbox_xyxy"])

    def run(batch: dict[str, Any], generator: Any = None) -> dict[str, Any]:
        image = batch["image"].float().div_(255)
        image, boxes = aug(image, batch["boxes.xyxy"].float())
        return {**batch, "image": image, "boxes.xyxy": boxes}

    return run
