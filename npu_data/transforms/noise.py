"""Keyed per-pixel normal noise in 8-bit levels (``RandomErasing(value="random")``).

A pixel's noise is a function of its sample's 32-bit seed (drawn keyed by (seed, epoch,
sample)), its channel and its position in the image: an integer hash (MurmurHash3's 32-bit
finaliser, twice) picks one of ``2 ** 16`` normal quantiles, turned into levels on the host
(:func:`level_table`). So the noise is the same under any batch size, padding, worker or
device, uses integer ops only (exact everywhere, no float on the device) and the reference
computes it with the same arithmetic on numpy arrays (:func:`noise_index` takes both).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import torch

from npu_data.transforms._kernels import DeviceTables

# ImageNet's mean and std: Normalize()'s defaults (transforms.normalize, which imports the
# functional ops that import this module)
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
SEEDS = 1 << 32  # seeds are drawn in [0, SEEDS)
TABLE = 1 << 16  # quantiles per channel
_SIDE = 1 << 15  # positions per row and column the counter keeps apart
Ints = Any  # a numpy int64 array or a torch int64 tensor: the same arithmetic on both


def _mul32(x: Ints, c: int) -> Ints:
    """``x * c mod 2**32`` for ``x`` in [0, 2**32), in 16-bit halves so no product leaves
    int64."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (x * hi % 65536) * 65536) % SEEDS


def _fmix32(h: Ints) -> Ints:
    """MurmurHash3's finaliser on values in [0, 2**32) (shifts as floor divisions)."""
    h = h ^ (h // 65536)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h // 8192)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h // 65536)


def noise_index(seed: Ints, channel: Ints, row: Ints, col: Ints) -> Ints:
    """Each pixel's column (0..65535) of :func:`level_table`: broadcast int64
    ``seed`` in [0, 2**32), ``channel``, ``row`` and ``col`` (positions in the image, folded
    every 32,768)."""
    counter = (channel * _SIDE + row % _SIDE) * _SIDE + col % _SIDE
    h = _fmix32((_fmix32(counter ^ seed) + seed) % SEEDS)
    return h // 65536


@functools.lru_cache(maxsize=8)
def _table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    z = np.array([NormalDist().inv_cdf((k + 0.5) / TABLE) for k in range(TABLE)])
    levels = np.rint(255.0 * (np.asarray(mean)[:, None] + np.asarray(std)[:, None] * z))
    out = np.clip(levels, 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


def level_table(mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """``(3, 65536)`` uint8: per channel, ``255 * (mean + std * z)`` rounded and clipped to
    0..255 for the 65,536 normal quantiles ``z`` at ``(k + 0.5) / 65536`` (read-only; made
    once per ``(mean, std)``): after ``Normalize(mean, std)`` the values are standard normal,
    as torchvision's ``value="random"`` noise, but for the clipped tails."""
    return _table(tuple(float(m) for m in mean), tuple(float(s) for s in std))


def level_tensor(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
                 ) -> torch.Tensor:
    """:func:`level_table` on ``device`` (made on first use, kept per device; not to be
    written)."""
    return _TENSORS.get((mean, std), device,
                        lambda: torch.from_numpy(level_table(mean, std).copy()))


_TENSORS = DeviceTables("the noise level table")
