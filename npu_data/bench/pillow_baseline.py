"""The baseline pipeline: JPEG files, Pillow decode and per-sample CPU augmentation.

What a user writes today: the Label Studio export read with ``json`` (box percent -> pixels),
a ``torch.utils.data.Dataset`` that opens one JPEG with Pillow and runs the CPU reference of
the same ``Compose`` (each transform's ``reference``, Pillow semantics) on that sample
alone, moving its boxes with the crop and the flip in numpy; a collate that stacks the images
and pads the boxes. Parameters come from torch's global RNG, as torchvision's do.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image

from npu_data.transforms.base import CropParams, Trait, flip_mask


def augmentation(crop: int = 224) -> Any:
    """RandomResizedCrop(crop) + ColorJitter(0.4, 0.4, 0.4, 0.1) + RandomHorizontalFlip()."""
    from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

    return Compose([RandomResizedCrop(crop), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def image_files(export_root: Path) -> list[Path]:
    """The JPEGs of a generated project, in task order."""
    return sorted((export_root / "images").glob("*.jpg"))


class Target(NamedTuple):
    """The boxes of one image: ``xyxy (N, 4) float32`` pixels and ``label (N,) int64``."""

    xyxy: np.ndarray
    label: np.ndarray


def _envelope(v: dict[str, Any], w: int, h: int) -> list[float]:
    x, y = v["x"] * w / 100, v["y"] * h / 100
    bw, bh = v["width"] * w / 100, v["height"] * h / 100
    r = math.radians(v.get("rotation", 0.0) or 0.0)
    c, s = math.cos(r), math.sin(r)
    xs = [x, x + bw * c, x + bw * c - bh * s, x - bh * s]
    ys = [y, y + bw * s, y + bw * s + bh * c, y + bh * c]
    return [min(xs), min(ys), max(xs), max(ys)]


def targets(export: Path, files: list[Path]) -> list[Target]:
    """Each file's rectangles from a Label Studio JSON export (first annotation, pixels)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for task in json.loads(Path(export).read_text(encoding="utf-8")):
        anns = task.get("annotations") or [{}]
        by_name[Path(str(task["data"]["image"])).name] = anns[0].get("result", [])
    names: dict[str, int] = {}
    out = []
    for f in files:
        boxes, labels = [], []
        for r in by_name.get(f.name, []):
            if r.get("type") != "rectanglelabels":
                continue
            v = r["value"]
            boxes.append(_envelope(v, r["original_width"], r["original_height"]))
            labels.append(names.setdefault(v["rectanglelabels"][0], len(names)))
        out.append(Target(np.asarray(boxes, np.float32).reshape(-1, 4),
                          np.asarray(labels, np.int64)))
    return out


def crop_boxes(t: Target, box: list[int], size: tuple[int, int], min_visible: float) -> Target:
    """Boxes through a resized crop ``box = (top, left, height, width)`` to ``size = (h, w)``:
    mapped, clipped, and dropped when less than ``min_visible`` of their area stays."""
    top, left, ch, cw = box
    oh, ow = size
    scale = np.array([ow / cw, oh / ch, ow / cw, oh / ch], np.float32)
    xyxy = (t.xyxy - np.array([left, top, left, top], np.float32)) * scale
    clipped = np.clip(xyxy, 0, np.array([ow, oh, ow, oh], np.float32))
    before = np.prod(np.clip(xyxy[:, 2:] - xyxy[:, :2], 0, None), axis=1)
    after = np.prod(clipped[:, 2:] - clipped[:, :2], axis=1)
    inside = (clipped == xyxy).all(axis=1)
    frac = np.where(before > 0, after / np.maximum(before, 1e-12), inside.astype(np.float32))
    keep = (frac >= min_visible) & ((after > 0) | (before <= 0))
    return Target(clipped[keep], t.label[keep])


def flip_boxes(t: Target, width: int) -> Target:
    """Boxes mirrored in an image ``width`` pixels wide."""
    xyxy = t.xyxy.copy()
    xyxy[:, 0], xyxy[:, 2] = width - t.xyxy[:, 2], width - t.xyxy[:, 0]
    return Target(xyxy, t.label)


class JpegDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """JPEG files and their boxes, one sample at a time: ``read``, ``decode`` and ``augment``
    are the stages ``__getitem__`` chains (the stage breakdown times them one by one), each
    subclass's own, as is ``pipeline(crop)``, the augmentation it makes."""

    def __init__(self, files: list[Path], boxes: list[Target], crop: int = 224) -> None:
        if len(files) != len(boxes):
            raise ValueError(f"{len(files)} files but {len(boxes)} box lists")
        self.files, self.boxes = list(files), list(boxes)
        self.augmentation = self.pipeline(crop)

    @staticmethod
    def pipeline(crop: int) -> Any:
        """The augmentation of every sample."""
        raise NotImplementedError

    def read(self, i: int) -> tuple[int, Any]:
        """Sample ``i``'s file, read as far as the decode wants it."""
        raise NotImplementedError

    def decode(self, item: tuple[int, Any]) -> tuple[int, Any]:
        """The read file decoded."""
        raise NotImplementedError

    def augment(self, item: tuple[int, Any]) -> dict[str, Any]:
        """The decoded image and its boxes augmented: ``image``, ``boxes.xyxy``,
        ``boxes.label``."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.augment(self.decode(self.read(i)))


class JpegReference(JpegDataset):
    """Read one JPEG, decode it with Pillow, augment it and its boxes alone on the CPU."""

    pipeline = staticmethod(augmentation)

    def read(self, i: int) -> tuple[int, bytes]:
        """The file's bytes."""
        return i, self.files[i].read_bytes()

    def decode(self, item: tuple[int, bytes]) -> tuple[int, np.ndarray]:
        """Pillow decode to an RGB HWC uint8 array."""
        i, blob = item
        with Image.open(io.BytesIO(blob)) as im:
            return i, np.array(im.convert("RGB"))

    def augment(self, item: tuple[int, np.ndarray]) -> dict[str, Any]:
        """Each transform's CPU reference on this sample; boxes follow the crop and the flip."""
        i, img = item
        target = self.boxes[i]
        for t in self.augmentation.transforms:
            one = {"image": torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None],
                   "sizes": torch.tensor([img.shape[:2]])}
            params = t.get_params(one)
            img = t.reference(img, params, 0)
            flip = flip_mask(params) if Trait.HFLIP in t.traits else None
            if Trait.CROP in t.traits:
                box = [int(v) for v in CropParams.of(params).boxes[0].tolist()]
                target = crop_boxes(target, box, t.size, t.min_visible)
            elif flip is not None and bool(flip[0]):
                target = flip_boxes(target, img.shape[1])
        return {"image": torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1),
                "boxes.xyxy": torch.from_numpy(target.xyxy),
                "boxes.label": torch.from_numpy(target.label)}


def collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Stack the images; pad the boxes to the batch's most (``boxes.valid``, label -1)."""
    n = max([len(s["boxes.label"]) for s in samples] + [0])
    b = len(samples)
    xyxy = torch.zeros((b, n, 4), dtype=torch.float32)
    label = torch.full((b, n), -1, dtype=torch.int64)
    valid = torch.zeros((b, n), dtype=torch.bool)
    for k, s in enumerate(samples):
        m = len(s["boxes.label"])
        xyxy[k, :m], label[k, :m], valid[k, :m] = s["boxes.xyxy"], s["boxes.label"], True
    return {"image": torch.stack([s["image"] for s in samples]), "boxes.xyxy": xyxy,
            "boxes.label": label, "boxes.valid": valid}


def loader(files: list[Path], batch_size: int, workers: int, crop: int = 224,
           export: Path | None = None, pin_memory: bool = False,
           dataset: type[JpegDataset] = JpegReference) -> Any:
    """The baseline torch DataLoader of ``dataset`` (shuffled, persistent workers when there
    are any).

    Boxes come from ``export`` (default: ``export.json`` beside the images folder).
    """
    export = export if export is not None else files[0].parent.parent / "export.json"
    return torch.utils.data.DataLoader(
        dataset(files, targets(export, files), crop), batch_size=batch_size,
        shuffle=True, num_workers=workers, collate_fn=collate, pin_memory=pin_memory,
        persistent_workers=workers > 0, prefetch_factor=4 if workers else None,
        generator=torch.Generator().manual_seed(0))
