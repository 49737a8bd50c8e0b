"""Optional frameworks in the suite: Kornia and NVIDIA DALI (measured when installed), FFCV
(listed).

Kornia runs the same augmentation as ``kornia.augmentation`` on our DataLoader's batches from
raw shards (same workers, same batches, boxes as ``bbox_xyxy``): images become float in
[0, 1], as Kornia expects. The bench images share one size, so the padded batch is the image.
Kornia moves boxes but neither clips them nor drops the ones cropped away (``boxes.valid`` is
passed through unchanged).

DALI (``pip install nvidia-dali-cuda120``; CPU-only with ``device_id=None``) runs its own
pipeline on the bench's JPEG files (the bytes the encoded shards hold), its parameters taken
from the suite's ``baseline.augmentation`` (``dali_settings``): ``fn.readers.file`` over the
file list, the whole list reshuffled every epoch (``shuffle_after_epoch``, seeded);
``fn.decoders.image_random_crop`` on the CPU, decoding only the crop region (area (0.08, 1),
aspect ratio (3/4, 4/3), 10 attempts); ``fn.resize`` to crop x crop, linear with antialias
(a triangle filter when shrinking, like PIL's BILINEAR); ``fn.color_twist`` with brightness,
contrast and saturation factors uniform in [0.6, 1.4] and hue uniform in [-36, 36] degrees
(ColorJitter(0.4, 0.4, 0.4, 0.1)); a coin-flip mirror fused with the HWC -> CHW change
(``fn.crop_mirror_normalize``, uint8). Threads: ``workers or 2`` in the training process (no
worker processes), prefetch queue 2. Batches come through DALI's PyTorch iterator as
``{"image": uint8 (B, 3, crop, crop)}`` on the host. An epoch is one pass over the files: the
reader pads the last batch with repeats of the last file (decoded too: at most batch - 1 extra
decodes per epoch) and the iterator returns it partial, as torch's DataLoader does.

Not the same semantics as torchvision's: DALI's decoder (nvImageCodec), crop draw, fallback
crop and resampling are its own, so pixels are not bit-exact with Pillow; the colour ops run
in one fixed order as one linear transform (hue and saturation as a rotation and scale in YIQ,
not PIL's HSV round trip; contrast pivots on mid-grey 128, not the image's mean grey) where
torchvision applies four PIL ops in a random order; no boxes are carried (every other
pipeline moves and filters them), so it does less work per image.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

FRAMEWORKS = (("kornia", "Kornia"), ("nvidia.dali", "NVIDIA DALI"), ("ffcv", "FFCV"))
MEASURED = frozenset({"kornia", "dali"})
DALI_READER = "reader"


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


def dali_label(workers: int) -> str:
    return f"NVIDIA DALI on the CPU (crop-region decode), {workers or 2} threads"


def dali_settings(augmentation: Any, files: Sequence[Path], batch_size: int, workers: int,
                  seed: int = 0) -> dict[str, dict[str, Any]]:
    """The DALI ops' arguments (plain values) for ``augmentation``, a Compose of
    RandomResizedCrop, ColorJitter and RandomHorizontalFlip (``baseline.augmentation``)."""
    by = {t.name: t for t in augmentation.transforms}
    crop, jitter, flip = by["RandomResizedCrop"], by["ColorJitter"], by["RandomHorizontalFlip"]
    ident = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}
    twist = {k: tuple(jitter.ranges[k] or (v, v)) for k, v in ident.items()}
    twist["hue"] = (360 * twist["hue"][0], 360 * twist["hue"][1])  # DALI: degrees
    return {
        "pipeline": {"batch_size": batch_size, "num_threads": workers or 2, "device_id": None,
                     "prefetch_queue_depth": 2, "seed": seed},
        "reader": {"files": [str(f) for f in files], "shuffle_after_epoch": True,
                   "shuffle_after_epoch_seed": seed, "pad_last_batch": True,
                   "name": DALI_READER},
        "decode": {"device": "cpu", "random_area": list(crop.scale),
                   "random_aspect_ratio": list(crop.ratio), "num_attempts": crop.attempts},
        "resize": {"resize_y": crop.size[0], "resize_x": crop.size[1], "antialias": True},
        "twist": twist,
        "flip": {"probability": flip.p},
    }


class DaliBatches:
    """DALI's PyTorch iterator as the suite's loaders: one epoch per ``iter()``, batches as
    ``{"image": tensor}``.

    DALI runs ahead: when an epoch's last batch is out, its executor is still decoding the
    next epoch's first batches (``prefetch_queue_depth`` of them; about 1.3 s of both cores
    for 2 MP JPEGs). Left alone, that work runs during the next pipeline of the interleaved
    run — the torchvision baseline — and slows it (measured: 42-46 img/s instead of 52, so
    every ratio looked ~15% better than it is). An epoch therefore ends only when this
    process is idle again: DALI is charged for the work it did ahead, and no other pipeline
    shares the cores with it."""

    def __init__(self, iterator: Any) -> None:
        self.iterator, self.ended = iterator, False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.ended:
            self.iterator.reset()
        self.ended = False
        for out in self.iterator:
            yield out[0]
        wait_until_idle()
        self.ended = True


def wait_until_idle(window: float = 0.02, busy: float = 0.2, limit: float = 30.0) -> None:
    """Return once this process used under ``busy`` of one core over ``window`` seconds (its
    background threads are done), or after ``limit`` seconds."""
    import psutil

    me, end = psutil.Process(), time.perf_counter() + limit
    while time.perf_counter() < end:
        t0, c0 = time.perf_counter(), sum(me.cpu_times()[:2])
        time.sleep(window)
        if sum(me.cpu_times()[:2]) - c0 < busy * (time.perf_counter() - t0):
            return


def dali_loader(files: Sequence[Path], batch_size: int, workers: int, crop: int = 224,
                seed: int = 0) -> DaliBatches:
    """The DALI CPU pipeline of this module's docstring, built and ready to iterate."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from npu_data.bench.pillow_baseline import augmentation

    s = dali_settings(augmentation(crop), files, batch_size, workers, seed)
    pipe = Pipeline(**s["pipeline"])
    with pipe:
        jpegs, _ = fn.readers.file(**s["reader"])
        images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB, **s["decode"])
        images = fn.resize(images, interp_type=types.INTERP_LINEAR, **s["resize"])
        images = fn.color_twist(images, **{k: lo if lo == hi else fn.random.uniform(
            range=[lo, hi]) for k, (lo, hi) in s["twist"].items()})
        mirror = fn.random.coin_flip(**s["flip"])
        pipe.set_outputs(fn.crop_mirror_normalize(images, dtype=types.UINT8,
                                                  output_layout="CHW", mirror=mirror))
    return DaliBatches(DALIGenericIterator(pipe, ["image"], reader_name=DALI_READER,
                                           last_batch_policy=LastBatchPolicy.PARTIAL))
