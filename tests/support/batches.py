"""Padded image batches of mixed sizes (sample ``i`` valid in its top-left ``sizes[i]``), as the
loaders collate them, for the transforms' tests: ``padded`` pads given images, ``random_padded``
and ``mixed_levels`` draw them, ``edge_images`` draws images with hard edges; ``keyed_params``
draws a transform's parameters for a batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from npu_data.transforms.draws import sample_keys


def padded(imgs: list[np.ndarray], hw: tuple[int, int] | None = None
           ) -> dict[str, torch.Tensor]:
    """HWC uint8 images as one batch: ``image`` (B, 3, H, W) with image ``i`` at the top-left
    and zeros around it (H, W: ``hw``, else the largest sides), ``sizes`` (B, 2) int64."""
    hmax, wmax = hw or (max(im.shape[0] for im in imgs), max(im.shape[1] for im in imgs))
    pad = np.zeros((len(imgs), 3, hmax, wmax), np.uint8)
    for i, im in enumerate(imgs):
        pad[i, :, :im.shape[0], :im.shape[1]] = im.transpose(2, 0, 1)
    return {"image": torch.from_numpy(pad),
            "sizes": torch.tensor([im.shape[:2] for im in imgs], dtype=torch.int64)}


def random_padded(seed: int, b: int, heights: tuple[int, int], widths: tuple[int, int],
                  hw: tuple[int, int] | None = None
                  ) -> tuple[list[np.ndarray], dict[str, torch.Tensor]]:
    """``b`` random images, heights and widths drawn from the half-open ranges, and their
    ``padded`` batch."""
    rng = np.random.default_rng(seed)
    sizes = np.stack([rng.integers(*heights, b), rng.integers(*widths, b)], 1)
    imgs = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8) for h, w in sizes]
    return imgs, padded(imgs, hw)


def edge_images(rng: np.random.Generator, sizes: list[tuple[int, int]]) -> list[np.ndarray]:
    """Images of ``sizes``: random ones at even positions, hard edges (every third column
    white, every fifth row green) at odd ones, where a resampler's rounding shows most."""
    out = []
    for i, (h, w) in enumerate(sizes):
        if i % 2:
            img = np.zeros((h, w, 3), np.uint8)
            img[:, ::3] = 255
            img[::5, :, 1] = 255
        else:
            img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        out.append(img)
    return out


_SIZES = [(1, 1), (2, 7), (3, 3), (37, 1), (1, 29), (4, 2)]


def mixed_levels(seed: int, n: int = 12, channels_last: bool = False
                 ) -> tuple[list[np.ndarray], torch.Tensor, torch.Tensor]:
    """Random, few-level and flat images of mixed sizes (1-px lines included), padded."""
    rng = np.random.default_rng(seed)
    head = _SIZES[: n // 2]
    sizes = head + [(int(rng.integers(1, 48)), int(rng.integers(1, 48)))
                    for _ in range(n - len(head))]
    imgs = []
    for i, (h, w) in enumerate(sizes):
        if i % 3 == 0:
            img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        elif i % 3 == 1:
            img = rng.choice(np.array([0, 1, 127, 128, 254, 255], np.uint8), (h, w, 3))
        else:
            img = rng.integers(100, 104, (h, w, 3), dtype=np.uint8)
        imgs.append(img)
    hmax, wmax = max(h for h, _ in sizes), max(w for _, w in sizes)
    batch = np.full((n, hmax, wmax, 3), 77, np.uint8)  # padding that must not count
    for i, img in enumerate(imgs):
        batch[i, : img.shape[0], : img.shape[1]] = img
    x = torch.from_numpy(batch).permute(0, 3, 1, 2)
    return imgs, (x if channels_last else x.contiguous()), torch.tensor(sizes)


def keyed_params(t: Any, batch: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """``t``'s parameters for ``batch``, drawn keyed by ``seed`` and each sample's index."""
    return t.draw_keyed(np.asarray(batch["sizes"]), sample_keys(seed, 0, np.asarray(batch["index"])))
