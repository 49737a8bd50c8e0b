"""NpuPreprocessor, the augmentation presets the article promised, as one Compose; and
torchvision's reference recipes: :func:`classification` and :func:`detection`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from npu_data.buckets import BucketSpec, buckets_of
from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.base import Trait, Transform, pair
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
        return next(t for t in self.transforms if Trait.CROP in t.traits)


# --- torchvision's reference recipes (references/classification and detection presets.py) ---
POLICIES = ("ra", "ta_wide", "imagenet")
"""``classification``'s ``auto_augment_policy`` values (torchvision's, AugMix aside)."""

DETECTION = ("hflip", "ssd", "ssdlite", "lsj")
"""``detection``'s ``data_augmentation`` values (torchvision's, ``multiscale`` aside)."""

DETECTION_MEAN = (123, 117, 104)
"""The fill of torchvision's detection presets (``DetectionPresetTrain``'s ``mean``)."""


def classification(crop_size: int | Sequence[int] = 224, *, interpolation: str = "bilinear",
                   hflip_prob: float = 0.5, auto_augment_policy: str | None = None,
                   ra_magnitude: int = 9, random_erase_prob: float = 0.0,
                   mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                   mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0,
                   num_classes: int | None = None, dtype: torch.dtype = torch.float32
                   ) -> Compose:
    """torchvision's ``ClassificationPresetTrain`` (``references/classification/
    presets.py``) and its ``get_mixup_cutmix``, as one batched pipeline: RandomResizedCrop →
    flip (``hflip_prob > 0``) → the policy → RandomErasing (``random_erase_prob > 0``) →
    Normalize → MixUp / CutMix (both: ``RandomChoice``, equal odds, one per batch as the
    reference's ``collate_fn``). torchvision erases after Normalize with 0; here before it
    with the mean's levels (``RandomErasing``'s ``value``), the same pixels up to rounding.

    Args:
        crop_size: The crop's output (height, width), or one int for both.
        interpolation: The crop's and the policy's filter (the reference's ``bilinear``).
        hflip_prob: The flip's probability (0: no flip).
        auto_augment_policy: None, ``"ra"`` (RandAugment), ``"ta_wide"``
            (TrivialAugmentWide) or ``"imagenet"`` (AutoAugment).
        ra_magnitude: RandAugment's magnitude.
        random_erase_prob: RandomErasing's probability (0: none).
        mean: Normalize's mean (0..1 per channel).
        std: Normalize's std.
        mixup_alpha: MixUp's alpha (0: no MixUp).
        cutmix_alpha: CutMix's alpha (0: no CutMix).
        num_classes: The class count of MixUp / CutMix (None: the dataset's, through the
            DataLoader).
        dtype: The normalised output's dtype.

    Returns:
        The pipeline (a keyed ``Compose``).

    Raises:
        UserError: An unknown policy or a bad argument of one of the stages.
    """
    from npu_data.transforms.auto_augment import AutoAugment, RandAugment, TrivialAugmentWide
    from npu_data.transforms.containers import RandomChoice
    from npu_data.transforms.mixing import CutMix, MixUp
    from npu_data.transforms.pixel_ops import RandomErasing

    stages: list[Transform] = [RandomResizedCrop(crop_size, interpolation=interpolation)]
    if hflip_prob > 0:
        stages.append(RandomHorizontalFlip(hflip_prob))
    if auto_augment_policy == "ra":
        stages.append(RandAugment(magnitude=ra_magnitude, interpolation=interpolation))
    elif auto_augment_policy == "ta_wide":
        stages.append(TrivialAugmentWide(interpolation=interpolation))
    elif auto_augment_policy == "imagenet":
        stages.append(AutoAugment("imagenet", interpolation=interpolation))
    elif auto_augment_policy is not None:
        raise UserValueError(f"presets.classification: auto_augment_policy must be None or one "
                             f"of {', '.join(POLICIES)}, got {auto_augment_policy!r}")
    if random_erase_prob > 0:
        levels = [round(255 * float(m)) for m in mean]
        stages.append(RandomErasing(random_erase_prob, value=levels))
    stages.append(Normalize(mean, std, dtype))
    mixing: list[Transform] = []
    if mixup_alpha > 0:
        mixing.append(MixUp(mixup_alpha, num_classes))
    if cutmix_alpha > 0:
        mixing.append(CutMix(cutmix_alpha, num_classes))
    if len(mixing) == 2:
        stages.append(RandomChoice(mixing))
    else:
        stages += mixing
    return Compose(stages)


def detection(data_augmentation: str = "hflip", *, hflip_prob: float = 0.5,
              fill: int | Sequence[int] = DETECTION_MEAN,
              target_size: int | Sequence[int] = 1024, dtype: torch.dtype = torch.float32
              ) -> Compose:
    """torchvision's ``DetectionPresetTrain`` (``references/detection/presets.py``), the v2
    path: ``"hflip"`` (flip), ``"ssd"`` (RandomPhotometricDistort, RandomZoomOut(fill),
    RandomIoUCrop, flip), ``"ssdlite"`` (RandomIoUCrop, flip), ``"lsj"`` (ScaleJitter,
    FixedSizeCrop(fill), flip); then SanitizeBoundingBoxes and the float conversion
    (``ToDtype(float, scale=True)``: 0..1). The fill is the preset's mean, as its PIL path
    pads (its v2 path pads with 0: ``_get_fill`` finds no key in the ``defaultdict``; pass
    ``fill=0`` for those pixels).

    Args:
        data_augmentation: ``"hflip"``, ``"ssd"``, ``"ssdlite"`` or ``"lsj"``.
        hflip_prob: The flip's probability.
        fill: The canvas colour of RandomZoomOut (ssd) and FixedSizeCrop (lsj).
        target_size: LSJ's ScaleJitter target and FixedSizeCrop size (the reference's 1024).
        dtype: The output's float dtype.

    Returns:
        The pipeline (a keyed ``Compose``).

    Raises:
        UserError: An unknown ``data_augmentation`` or a bad argument of one of the stages.
    """
    from npu_data.transforms.detection import RandomIoUCrop, RandomZoomOut, ScaleJitter
    from npu_data.transforms.fixed_crop import FixedSizeCrop
    from npu_data.transforms.pixel_ops import RandomPhotometricDistort
    from npu_data.transforms.sanitize import SanitizeBoundingBoxes

    flip = RandomHorizontalFlip(hflip_prob)
    recipes: dict[str, Callable[[], list[Transform]]] = {
        "hflip": lambda: [flip],
        "ssd": lambda: [RandomPhotometricDistort(), RandomZoomOut(fill=fill), RandomIoUCrop(),
                        flip],
        "ssdlite": lambda: [RandomIoUCrop(), flip],
        "lsj": lambda: [ScaleJitter(target_size), FixedSizeCrop(target_size, fill=fill),
                        flip],
    }
    make = recipes.get(data_augmentation)
    if make is None:
        raise UserValueError(f"presets.detection: data_augmentation must be one of "
                             f"{', '.join(DETECTION)}, got {data_augmentation!r}")
    return Compose([*make(), SanitizeBoundingBoxes(), Normalize(0.0, 1.0, dtype)])
