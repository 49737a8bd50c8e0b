"""NpuPreprocessor: the augmentation presets the article promised, as one Compose."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from npu_data.common.buckets import BucketSpec, buckets_of
from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import Transform, pair
from npu_data.transforms.color import ColorJitter
from npu_data.transforms.compose import Compose
from npu_data.transforms.crop import RandomResizedCrop
from npu_data.transforms.flip import RandomHorizontalFlip
from npu_data.transforms.functional import check_interpolation
from npu_data.transforms.normalize import IMAGENET_MEAN, IMAGENET_STD, Normalize
from npu_data.transforms.resize import ResizeCenterCrop, ResizeCrop

LEVELS = {
    0: "resize the shorter side to image_size, centre crop (evaluation)",
    1: "RandomHorizontalFlip + RandomResizedCrop (diffusers' order: resize, flip, crop)",
    2: "level 1 + ColorJitter(0.2, 0.2, 0.2)",
    3: "level 1 + ColorJitter(0.4, 0.4, 0.4, hue=0.1)",
}
"""``NpuPreprocessor``'s ``augment_level`` values and what each applies."""


def preset(
    image_size: int | Sequence[int], augment_level: int, min_visible: float = 0.25,
    buckets: BucketSpec | None = None, no_upscale: bool = False,
    interpolation: str = "bilinear",
) -> list[Transform]:
    """The uint8 transforms of ``augment_level`` (see ``LEVELS``); with ``buckets``, the
    bucketed (AIGC) preset: ``ResizeCrop`` to each batch's bucket (centre at level 0, a
    random offset above) instead of the crops. ``interpolation``: the crop's filter. Above
    level 0 the flip comes first, diffusers' order (resize, flip, crop): the crop's window is
    drawn in the mirrored image and ``crop_top_left`` is that window."""
    size = pair(image_size, "image_size", "NpuPreprocessor")
    if isinstance(augment_level, bool) or augment_level not in LEVELS:
        choices = "; ".join(f"{k}: {v}" for k, v in LEVELS.items())
        raise UserValueError(f"NpuPreprocessor: augment_level must be one of {choices}; got "
                             f"{augment_level!r}")
    first: Transform
    if buckets is not None:
        if size[0] != size[1]:
            raise UserValueError(
                f"NpuPreprocessor: with buckets, image_size is the side the preset "
                f"buckets scale to (an int), got {image_size!r}"
            )
        given = None if buckets == "sampler" else buckets_of(
            buckets, size=size[0], no_upscale=no_upscale, who="NpuPreprocessor")
        first = ResizeCrop(None, crop="center" if augment_level == 0 else "random",
                           buckets=given, min_visible=min_visible, no_upscale=no_upscale,
                           interpolation=interpolation)
    elif augment_level == 0:
        first = ResizeCenterCrop(size, min_visible=min_visible, interpolation=interpolation)
    else:
        first = RandomResizedCrop(size, min_visible=min_visible, interpolation=interpolation)
    if augment_level == 0:
        return [first]
    out: list[Transform] = [RandomHorizontalFlip(), first]
    if augment_level == 2:
        out.append(ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2))
    elif augment_level == 3:
        out.append(ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1))
    return out


class NpuPreprocessor(Compose):
    """``NpuPreprocessor(image_size=1024, augment_level=2)``: a ready-made batched pipeline.

    ``NpuPreprocessor(image_size=1024, augment_level=2, buckets="sdxl", normalize=(0.5, 0.5),
    dtype=torch.bfloat16)`` is SDXL's input.

    Args:
        image_size: The output side, or (height, width); with ``buckets``, the side the
            buckets are scaled to (an int).
        augment_level: One of ``LEVELS``: 0 resizes and centre-crops (evaluation), 1 adds a
            random resized crop and flip, 2 and 3 colour jitter of growing strength.
        normalize: False (uint8 out), True (ImageNet mean/std) or ``(mean, std)`` (``(0.5,
            0.5)``: [-1, 1], diffusion models' inputs).
        dtype: The normalised output's dtype.
        channels_last: Give the normalised output ``torch.channels_last`` memory format.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their
            area after the crop are marked invalid.
        buckets: the bucketed preset for aspect-ratio batches (``BucketBatchSampler``),
            each batch resized to cover its bucket and cropped to it (``ResizeCrop``):
            ``"sampler"`` takes the DataLoader's sampler's buckets; ``"sdxl"`` (SDXL's
            1024-px list, scaled to ``image_size`` elsewhere: its largest aspect error said,
            refused where rounding merges buckets), ``"kohya"`` (kohya's rule at
            ``image_size``), a ``npu_data.Buckets`` or a list of (height, width) must equal
            the sampler's (the DataLoader checks when it is built).
        no_upscale: with buckets, a photo smaller than its bucket gets one inside it
            (kohya's ``bucket_no_upscale``).
        interpolation: the resize filter of the crop: ``"bilinear"``, ``"bicubic"``
            or ``"lanczos"`` (Pillow's, exact; diffusers' SDXL scripts use Lanczos).

    Raises:
        UserError: An ``augment_level`` not in ``LEVELS``, a ``normalize`` that is not
            True, False or (mean, std), an unknown ``interpolation``, or another argument out
            of range.
    """

    name = "NpuPreprocessor"

    def __init__(
        self,
        image_size: int | Sequence[int] = 224,
        augment_level: int = 1,
        normalize: bool | tuple[float | Sequence[float], float | Sequence[float]] = False,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
        min_visible: float = 0.25,
        buckets: BucketSpec | None = None,
        no_upscale: bool = False,
        interpolation: str = "bilinear",
    ) -> None:
        check_interpolation(interpolation, self.name)
        transforms = preset(image_size, augment_level, min_visible, buckets, no_upscale,
                            interpolation)
        if normalize is True:
            transforms.append(Normalize(IMAGENET_MEAN, IMAGENET_STD, dtype, channels_last))
        elif normalize is not False and normalize is not None:
            try:
                mean, std = normalize
            except (TypeError, ValueError) as e:
                error = UserTypeError if isinstance(e, TypeError) else UserValueError
                raise error(
                    "NpuPreprocessor: normalize must be True, False or (mean, std)"
                ) from None
            transforms.append(Normalize(mean, std, dtype, channels_last))
        super().__init__(transforms)
        self.image_size = pair(image_size, "image_size", self.name)
        self.augment_level = augment_level
        self.buckets = self.crop.buckets if buckets is not None else None  # type: ignore[attr-defined]

    @property
    def crop(self) -> Transform:
        """The preset's crop (after the flip above level 0: diffusers' order)."""
        return next(t for t in self.transforms if t.crops)
