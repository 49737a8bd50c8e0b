"""Aspect-ratio buckets: the resolutions SDXL-style training groups photos into, and the rule
that puts each image in one (shared by ``loaders.buckets.BucketBatchSampler`` and
``transforms.ResizeCrop(size=None)``, so the sampler and the resize always agree).

A bucket is ``(height, width)``. An image of ``(h, w)`` goes to the bucket whose log aspect
ratio ``log(bh / bw)`` is closest to ``log(h / w)``; a tie goes to the first listed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_data.errors import UserValueError

# SDXL's 1024-px list (about 1024² pixels each; kohya sd-scripts, diffusers' SDXL trainers)
SDXL = ((1024, 1024), (1152, 896), (896, 1152), (1216, 832), (832, 1216), (1344, 768),
        (768, 1344), (1536, 640), (640, 1536))
PRESETS = {"sdxl": SDXL}

BucketSpec = str | Sequence[Sequence[int]]


def bucket_list(buckets: BucketSpec, size: int | None = None, step: int = 64,
                who: str = "buckets") -> tuple[tuple[int, int], ...]:
    """The buckets of ``buckets``: a preset name (``"sdxl"``) or a list of (height, width).

    Args:
        buckets: ``"sdxl"`` or a sequence of ``(height, width)`` pairs of positive ints.
        size: a preset's side scaled from 1024 to this (each side rounded to a multiple of
            ``step``, at least ``step``); ignored for an explicit list.
        step: the rounding of scaled preset sides.
        who: the name in error messages.

    Returns:
        The buckets as a tuple of ``(height, width)``.

    Raises:
        UserError: an unknown preset, an empty list or a bad pair.
    """
    if isinstance(buckets, str):
        preset = PRESETS.get(buckets)
        if preset is None:
            raise UserValueError(f"{who}: unknown bucket preset {buckets!r} — use "
                                 f"{', '.join(map(repr, PRESETS))} or a list of (height, width)")
        if size is None or size == 1024:
            return preset
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UserValueError(f"{who}: size must be a positive int, got {size!r}")
        return tuple(_dedupe((_snap(h * size / 1024, step), _snap(w * size / 1024, step))
                             for h, w in preset))
    try:
        out = tuple((int(h), int(w)) for h, w in buckets)
        ok = all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                 for pair in buckets for v in pair)
    except (TypeError, ValueError):
        out, ok = (), False
    if not ok or not out or any(h < 1 or w < 1 for h, w in out):
        raise UserValueError(
            f"{who}: buckets must be 'sdxl' or a non-empty list of (height, width) "
            f"positive ints, got {buckets!r}"
        )
    return out


def _snap(v: float, step: int) -> int:
    return max(step, int(round(v / step)) * step)


def _dedupe(pairs: object) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in pairs:  # type: ignore[attr-defined]
        if p not in out:
            out.append(p)
    return out


def assign(sizes: np.ndarray, buckets: Sequence[tuple[int, int]]) -> np.ndarray:
    """``(N,)`` int64: the bucket of each ``(height, width)`` row of ``sizes`` (N, 2), the one
    of closest log aspect ratio (ties: the first listed). Computed from sizes alone."""
    s = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
    b = np.asarray(buckets, dtype=np.float64).reshape(-1, 2)
    if not len(s):
        return np.zeros(0, np.int64)
    image = np.log(np.maximum(s[:, 0], 1.0)) - np.log(np.maximum(s[:, 1], 1.0))
    target = np.log(b[:, 0]) - np.log(b[:, 1])
    return np.abs(image[:, None] - target[None, :]).argmin(axis=1).astype(np.int64)
