"""Aspect-ratio buckets: the resolutions SDXL-style training groups photos into, and the rule
that puts each image in one. One :class:`Buckets` serves ``loaders.BucketBatchSampler`` and
``transforms.ResizeCrop(size=None)``: the DataLoader hands the sampler's to the transform,
so the two cannot disagree.

A bucket is ``(height, width)``. An image of ``(h, w)`` goes to the bucket whose log aspect
ratio ``log(bh / bw)`` is closest to ``log(h / w)``; a tie goes to the first listed. With
``no_upscale`` (kohya's ``bucket_no_upscale``) an image smaller than that bucket on either
side gets the bucket scaled down to fit inside it, sides rounded down to ``step``.

Lists: ``"sdxl"`` is SDXL's published 1024-px list; :func:`make_buckets` is kohya sd-scripts'
generator (``make_bucket_resolutions``) for any resolution (``"kohya"`` with a size); a preset
scaled to another size says its largest aspect-ratio error and never merges two buckets.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from npu_data.errors import UserTypeError, UserValueError

# SDXL's 1024-px list (about 1024² pixels each; kohya sd-scripts, diffusers' SDXL trainers)
SDXL = ((1024, 1024), (1152, 896), (896, 1152), (1216, 832), (832, 1216), (1344, 768),
        (768, 1344), (1536, 640), (640, 1536))
PRESETS = {"sdxl": SDXL}


def make_buckets(resolution: int, step: int = 64, min_side: int | None = None,
                 max_side: int | None = None) -> tuple[tuple[int, int], ...]:
    """kohya sd-scripts' ``make_bucket_resolutions``: the square of side ``resolution``
    rounded down to ``step``, and for every width from ``min_side`` to ``max_side`` in
    ``step``s the largest height, a multiple of ``step`` and at most ``max_side``, whose area
    is at most ``resolution²`` — both orientations, sorted.

    Args:
        resolution: the side of the square whose area bounds every bucket (1024 for SDXL).
        step: sides are multiples of it (64: the VAE's 8 times the UNet's 8).
        min_side: the shortest side (default ``resolution // 4``, kohya's 256 at 1024).
        max_side: the longest side (default ``2 * resolution``, kohya's SDXL setting).

    Returns:
        ``(height, width)`` pairs.

    Raises:
        UserValueError: a side or step that is not a positive int, or sides out of order.
    """
    for what, v in (("resolution", resolution), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise UserValueError(f"make_buckets: {what} must be a positive int, got {v!r}")
    lo = resolution // 4 if min_side is None else int(min_side)
    hi = 2 * resolution if max_side is None else int(max_side)
    if not step <= lo <= hi:
        raise UserValueError(f"make_buckets: need step <= min_side <= max_side, got step={step}, "
                             f"min_side={lo}, max_side={hi}")
    area = resolution * resolution
    side = (resolution // step) * step
    out = {(side, side)}
    for width in range(lo, hi + 1, step):
        height = min(hi, (area // width) // step * step)
        if height >= lo:
            out.update({(height, width), (width, height)})
    return tuple(sorted(out))


@dataclass(frozen=True)
class Buckets:
    """A bucket list and the rule that gives each image its bucket (module doc).

    Attributes:
        sizes: the listed ``(height, width)`` buckets.
        no_upscale: an image smaller than its bucket gets one inside it (kohya's rule).
        step: what sides round down to under ``no_upscale``.
        name: how the list was made (for messages).
        aspect_error: a scaled preset's largest relative aspect-ratio error (0 otherwise).
    """

    sizes: tuple[tuple[int, int], ...]
    no_upscale: bool = False
    step: int = 64
    name: str = "a list"
    aspect_error: float = 0.0

    def nearest(self, sizes: np.ndarray) -> np.ndarray:
        """``(N,)`` the listed bucket of closest log aspect ratio for each ``(h, w)`` row."""
        return assign(sizes, self.sizes)

    def targets(self, sizes: np.ndarray) -> np.ndarray:
        """``(N, 2)`` int64: each image's bucket (module doc)."""
        s = np.asarray(sizes, np.int64).reshape(-1, 2)
        out = np.asarray(self.sizes, np.int64).reshape(-1, 2)[self.nearest(s)]
        if not self.no_upscale or not len(s):
            return out
        fit = np.minimum(s[:, 0] / out[:, 0], s[:, 1] / out[:, 1])  # < 1: it would upscale
        small = fit < 1.0
        step = self.step
        inside = np.maximum(step, np.floor(out * fit[:, None] / step).astype(np.int64) * step)
        inside = np.minimum(inside, np.maximum(step, s // step * step))
        return np.where(small[:, None], inside, out)

    def same(self, other: Buckets) -> bool:
        """Whether both give every image the same bucket."""
        return self.sizes == other.sizes and self.no_upscale == other.no_upscale and (
            not self.no_upscale or self.step == other.step)

    def describe(self) -> str:
        """One line: what the list is."""
        extra = f", largest aspect error {self.aspect_error:.1%}" if self.aspect_error else ""
        up = ", no upscale" if self.no_upscale else ""
        return f"{self.name} ({len(self.sizes)} buckets{extra}{up})"


BucketSpec = str | Sequence[Sequence[int]] | Buckets


def buckets_of(spec: BucketSpec, size: int | None = None, *, step: int = 64,
               no_upscale: bool = False, who: str = "buckets") -> Buckets:
    """The :class:`Buckets` of ``spec``: a ``Buckets`` (kept), ``"sdxl"`` (scaled to ``size``
    when it is not 1024), ``"kohya"`` (:func:`make_buckets` at ``size``, 1024 by default) or a
    list of ``(height, width)``.

    Args:
        spec: the buckets, as above.
        size: the resolution a preset is scaled or generated at (None: 1024).
        step: what sides are multiples of.
        no_upscale: a photo smaller than its bucket gets one inside it.
        who: the name in error messages.

    Returns:
        The buckets and their rule.

    Raises:
        UserValueError: an unknown preset, an empty list, a bad pair or size, or a scaled
            preset whose rounding would merge two buckets.
        UserTypeError: a list that is not of (height, width) pairs.
    """
    if isinstance(spec, Buckets):
        return replace(spec, no_upscale=True) if no_upscale else spec
    if isinstance(spec, str):
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size < 1):
            raise UserValueError(f"{who}: size must be a positive int, got {size!r}")
        if spec == "kohya":
            res = 1024 if size is None else size
            return Buckets(make_buckets(res, step), no_upscale, step, f"kohya's rule at {res} px")
        preset = PRESETS.get(spec)
        if preset is None:
            raise UserValueError(f"{who}: unknown bucket preset {spec!r} — use "
                                 f"{', '.join(map(repr, [*PRESETS, 'kohya']))} or a list of "
                                 "(height, width)")
        if size is None or size == 1024:
            return Buckets(preset, no_upscale, step, f"{spec!r}")
        return _scaled(spec, preset, size, step, no_upscale, who)
    return Buckets(_pairs(spec, who), no_upscale, step, "a list")


def _scaled(name: str, preset: Sequence[tuple[int, int]], size: int, step: int,
            no_upscale: bool, who: str) -> Buckets:
    scaled = [(_snap(h * size / 1024, step), _snap(w * size / 1024, step)) for h, w in preset]
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for orig, new in zip(preset, scaled, strict=True):
        if new in seen:
            raise UserValueError(
                f"{who}: {name!r} scaled to {size} px at step {step} would merge {seen[new]} "
                f"and {orig} into {new} — use buckets='kohya' (kohya's rule at {size} px) or "
                "a list of (height, width)")
        seen[new] = orig
    error = max(abs((a / b) / (h / w) - 1.0) for (h, w), (a, b) in zip(preset, scaled,
                                                                      strict=True))
    out = Buckets(tuple(scaled), no_upscale, step, f"{name!r} scaled to {size} px",
                  round(error, 6))
    if (who, out.describe()) not in _said:  # said once per process and caller
        _said.add((who, out.describe()))
        warnings.warn(f"{who}: buckets {out.describe()} — kohya's rule at that size: "
                      "buckets='kohya'", UserWarning, stacklevel=3)
    return out


_said: set[tuple[str, str]] = set()


def bucket_list(buckets: BucketSpec, size: int | None = None, step: int = 64,
                who: str = "buckets") -> tuple[tuple[int, int], ...]:
    """The ``(height, width)`` buckets of ``buckets`` (:func:`buckets_of`)."""
    return buckets_of(buckets, size, step=step, who=who).sizes


def _pairs(spec: object, who: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = list(spec)  # type: ignore[call-overload]
        ok = bool(pairs) and all(
            len(p) == 2 and all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                                for v in p) for p in pairs)
    except TypeError:
        ok = False
    if not ok or any(int(v) < 1 for p in pairs for v in p):
        error = UserTypeError if not isinstance(spec, Sequence) else UserValueError
        raise error(f"{who}: buckets must be 'sdxl', 'kohya', npu_data.Buckets or a non-empty "
                    f"list of (height, width) positive ints, got {spec!r}")
    return tuple((int(h), int(w)) for h, w in pairs)


def _snap(v: float, step: int) -> int:
    return max(step, int(math.floor(v / step + 0.5)) * step)


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
