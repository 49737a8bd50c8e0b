"""Stand-in datasets for the loader tests: numpy columns, sample dicts like ShardDataset's,
and small generated photo projects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from npu_data.loaders import LabelStudioDataset
from npu_data.tools.sample_data import make_sample_project


class ArrayDataset(torch.utils.data.Dataset):
    """Variable-size images and boxes held in flat numpy columns (no per-sample objects)."""

    def __init__(self, n: int, max_side: int = 24, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.h = rng.integers(max_side // 2, max_side + 1, n).astype(np.int64)
        self.w = rng.integers(max_side // 2, max_side + 1, n).astype(np.int64)
        sizes = self.h * self.w * 3
        self.offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=self.offsets[1:])
        self.pixels = rng.integers(0, 256, int(self.offsets[-1]), dtype=np.uint8)
        self.nbox = rng.integers(0, 4, n)
        self.box_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(self.nbox, out=self.box_offsets[1:])
        m = int(self.box_offsets[-1])
        xy = rng.random((m, 2)).astype(np.float32) * 8
        self.boxes = np.concatenate([xy, xy + 4], axis=1)
        self.labels = rng.integers(0, 5, m).astype(np.int32)

    def __len__(self) -> int:
        return len(self.h)

    def __getitem__(self, i: int) -> dict[str, Any]:
        a, b = self.offsets[i], self.offsets[i + 1]
        img = self.pixels[a:b].reshape(int(self.h[i]), int(self.w[i]), 3)
        img.flags.writeable = False
        p, q = self.box_offsets[i], self.box_offsets[i + 1]
        xyxy = self.boxes[p:q]
        x0, y0, x1, y1 = (xyxy[:, k] for k in range(4))
        corners = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1),
                            np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)
        return {"image": img, "index": int(i), "task_id": 1000 + int(i),
                "boxes.xyxy": xyxy, "boxes.corners": corners.astype(np.float32),
                "boxes.label": self.labels[p:q],
                "texts.text": [f"t{i}"], "caption": f"t{i}"}


def noisy_flip(batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, Any]:
    """A small random batch transform: per-sample flip and an additive offset from generator."""
    img = batch["image"]
    b = img.shape[0]
    flip = torch.rand(b, generator=generator, device=img.device) < 0.5
    shift = torch.randint(0, 50, (b, 1, 1, 1), generator=generator, device=img.device)
    out = torch.where(flip[:, None, None, None], img.flip(-1), img)
    return {**batch, "image": (out.to(torch.int16) + shift).clamp(0, 255).to(torch.uint8),
            "flip": flip}


def photo_dataset(root: Path, n_images: int, width: int, height: int) -> LabelStudioDataset:
    """A generated project of ``n_images`` photos (``width`` x ``height``) under ``root``,
    read as a ``LabelStudioDataset`` with its cache beside it."""
    project = make_sample_project(root / "proj", n_images=n_images, width=width, height=height)
    return LabelStudioDataset(project.export_path, cache_dir=root / "cache")
