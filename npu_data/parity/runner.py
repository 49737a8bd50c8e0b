"""The parity suite behind ``npu-data parity``: every kernel of
:mod:`npu_data.transforms.functional`, a full augmentation pipeline and the DataLoader on random
padded batches on a device, each sample's valid region compared with
:mod:`npu_data.transforms.oracle.pillow` (measures and budgets: :mod:`npu_data.transforms.oracle.measures`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from npu_data.common.compat import autocast_available
from npu_data.device import DeviceLike, resolve_device
from npu_data.errors import UserError
from npu_data.parity.augment_rows import augment_rows
from npu_data.parity.geometric_rows import geometric_rows
from npu_data.transforms.oracle.measures import (
    PRECISION_TOLERANCES,
    TOLERANCES,
    ParityRow,
    RowAccumulator,
)

__all__ = ["run_parity_suite"]


# valid (height, width) always in a suite batch: single pixels, 1-px lines, extreme aspects
_SPECIAL_SIZES = ((1, 1), (1, 257), (300, 1), (2, 299), (283, 3))


def _make_batch(
    rng: np.random.Generator, n: int
) -> tuple[list[np.ndarray], torch.Tensor, torch.Tensor]:
    sizes = [_SPECIAL_SIZES[int(rng.integers(len(_SPECIAL_SIZES)))]]
    sizes += [(int(rng.integers(1, 301)), int(rng.integers(1, 301))) for _ in range(n - 1)]
    imgs = []
    for i, (h, w) in enumerate(sizes):
        if i % 3 == 2:  # flat, gray and saturated values: HSV and rounding edge cases
            img = rng.choice(np.array([0, 1, 127, 128, 254, 255], np.uint8), size=(h, w, 3))
        elif i % 3 == 1:  # smooth content
            yy, xx = np.mgrid[0:h, 0:w]
            base = (yy * 255 // max(h, 1) + xx * 255 // max(w, 1)) // 2
            img = np.stack([base, 255 - base, (base * 3) % 256], axis=-1).astype(np.uint8)
        else:
            img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        imgs.append(img)
    hmax, wmax = max(h for h, _ in sizes), max(w for _, w in sizes)
    padded = np.zeros((n, 3, hmax, wmax), np.uint8)
    for i, img in enumerate(imgs):
        padded[i, :, : img.shape[0], : img.shape[1]] = img.transpose(2, 0, 1)
    return imgs, torch.from_numpy(padded), torch.tensor(sizes, dtype=torch.int64)


def _boxes(rng: np.random.Generator, sizes: torch.Tensor) -> torch.Tensor:
    rows = []
    for j, (h, w) in enumerate(sizes.tolist()):
        kind = j % 4
        if kind == 0:  # one pixel
            ch, cw = 1, 1
        elif kind == 1:  # whole image
            ch, cw = h, w
        else:
            ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        rows.append((top, left, ch, cw))
    return torch.tensor(rows, dtype=torch.int64)


def _factors(rng: np.random.Generator, n: int, low: float, high: float) -> torch.Tensor:
    """Uniform in [low, high], the first three set to low, identity (1, or 0 for hue), high."""
    f = rng.uniform(low, high, size=n)
    f[: min(n, 3)] = (low, (low + high) / 2 if low < 0 else 1.0, high)[: min(n, 3)]
    return torch.tensor(f, dtype=torch.float32)


def _sample(out: torch.Tensor, i: int, h: int, w: int) -> np.ndarray:
    return out[i, :, :h, :w].permute(1, 2, 0).cpu().numpy()


def _pipeline() -> Any:
    from npu_data.transforms import (
        ColorJitter,
        Compose,
        RandomHorizontalFlip,
        RandomResizedCrop,
    )

    return Compose(
        [RandomResizedCrop(224), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()]
    )


def run_parity_suite(
    device: DeviceLike = "auto", seed: int = 0, batches: int = 2, batch_size: int = 8,
    precision: bool = True,
) -> list[ParityRow]:
    """Run every kernel on ``batches`` random padded batches on ``device`` and compare each
    sample with the Pillow reference; one :class:`ParityRow` per kernel (plus "pipeline" and
    "loader").

    On the CPU with the compiled kernels available, the pure-torch kernels (the ones that run
    on CUDA and NPU) are checked too, as rows named ``"<kernel> (torch)"``. With
    ``precision``, the torch kernels run again, down the accelerators' path, under each mode
    of :data:`npu_data.parity.precision.MODES` that ``device`` has: rows
    ``"<kernel> (torch, <mode>)"`` (no loader row).
    """
    from dataclasses import replace

    from npu_data.parity.precision import MODES, reduced_precision
    from npu_data.transforms.backends import accelerator_path, compiled_for, torch_kernels

    if batches < 1 or batch_size < 1:
        raise UserError(f"run_parity_suite: batches and batch_size must be >= 1, got {batches} "
                        f"and {batch_size}")
    dev = resolve_device(device)
    rows = _run_suite(dev, seed, batches, batch_size, TOLERANCES)
    if compiled_for(torch.empty(0, device=dev)):
        with torch_kernels():
            rows += [replace(r, kernel=f"{r.kernel} (torch)")
                     for r in _run_suite(dev, seed, batches, batch_size, TOLERANCES)]
    for mode, (_, _, autocast) in MODES.items() if precision else ():
        if autocast and not autocast_available(dev.type):
            continue
        with accelerator_path(), reduced_precision(mode, dev):
            rows += [replace(r, kernel=f"{r.kernel} (torch, {mode})") for r in
                     _run_suite(dev, seed, batches, batch_size, PRECISION_TOLERANCES)]
    return rows


def _run_suite(dev: torch.device, seed: int, batches: int, batch_size: int,
               tolerances: dict[str, tuple[float, float]]) -> list[ParityRow]:
    from npu_data.device import manual_seed
    from npu_data.transforms import functional as F
    from npu_data.transforms.oracle import pillow as R
    from npu_data.transforms.oracle.replay import replay_reference, sample_image

    rng = np.random.default_rng(seed)
    accs = {k: RowAccumulator(k, tol) for k, tol in tolerances.items()}
    color: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., np.ndarray], float, float]]
    color = {
        "adjust_brightness": (F.adjust_brightness, R.adjust_brightness, 0.0, 2.0),
        "adjust_contrast": (F.adjust_contrast, R.adjust_contrast, 0.0, 2.0),
        "adjust_saturation": (F.adjust_saturation, R.adjust_saturation, 0.0, 2.0),
        "adjust_hue": (F.adjust_hue, R.adjust_hue, -0.5, 0.5),
    }
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    pipe = _pipeline()
    for b in range(batches):
        imgs, images_cpu, sizes_cpu = _make_batch(rng, batch_size)
        images, sizes = images_cpu.to(dev), sizes_cpu.to(dev)
        hw = sizes_cpu.tolist()
        odd = (int(rng.integers(1, 64)) * 2 + 1, int(rng.integers(1, 160)) * 2 + 1)
        for size in (224, odd):  # square upscale/downscale, then an odd (h, w)
            boxes = _boxes(rng, sizes_cpu)
            out = F.resized_crop(images, sizes, boxes.to(dev), size)
            for i, img in enumerate(imgs):
                ref = R.resized_crop(img, boxes[i].tolist(), size)
                accs["resized_crop"].add(ref, _sample(out, i, ref.shape[0], ref.shape[1]))
        _window_rows(accs, rng, imgs, images, sizes, sizes_cpu)
        _filter_rows(accs, rng, imgs, images, sizes, sizes_cpu)
        flips = torch.from_numpy(rng.random(batch_size) < 0.5)
        flips[0] = True
        out = F.hflip(images, sizes, flips.to(dev))
        for i, img in enumerate(imgs):
            accs["hflip"].add(R.hflip(img, bool(flips[i])), _sample(out, i, *hw[i]))
        for name, (kernel, ref_fn, low, high) in color.items():
            f = _factors(rng, batch_size, low, high)
            out = kernel(images, sizes, f.to(dev))
            for i, img in enumerate(imgs):
                accs[name].add(ref_fn(img, float(f[i])), _sample(out, i, *hw[i]))
        out = F.normalize(images, mean, std)
        for i, img in enumerate(imgs):
            h, w = hw[i]
            accs["normalize"].add(R.normalize(img, mean, std), out[i, :, :h, :w])
        augment_rows(accs, rng, imgs, images, sizes, _seeded(dev, seed * 1000 + b * 20 + 1))
        # the pipeline: parameters drawn on the device, replayed per sample on the reference
        batch = {"image": images, "sizes": sizes}
        result, params = pipe.run(batch, manual_seed(seed * 1000 + b, dev))
        for i in range(batch_size):
            ref = replay_reference(pipe, sample_image(batch, i), params, i)
            accs["pipeline"].add(ref, sample_image(result, i))
        if "loader" in accs:
            _loader_rows(accs["loader"], pipe, imgs, dev, seed + b)
        geometric_rows(accs, rng, imgs, images, sizes, sizes_cpu)
    return [acc.row() for acc in accs.values()]


def _seeded(dev: torch.device, base: int) -> Callable[[int], torch.Generator]:
    """Generators on ``dev`` seeded ``base + k``: one per augmentation row."""
    from npu_data.device import manual_seed

    return lambda k: manual_seed(base + k, dev)


def _window_rows(accs: dict[str, RowAccumulator], rng: np.random.Generator,
                 imgs: list[np.ndarray], images: torch.Tensor, sizes: torch.Tensor,
                 sizes_cpu: torch.Tensor) -> None:
    """``resized_window``: random windows of whole resizes (up and down, padding, vertical
    first) against Pillow's resize then crop; ``resize_center_crop``: the evaluation preset
    against torchvision's PIL ``Resize(int)`` + ``CenterCrop`` (``reference``)."""
    from npu_data.transforms import ResizeCenterCrop
    from npu_data.transforms import functional as F
    from npu_data.transforms.oracle import pillow as R

    n = len(imgs)
    boxes = torch.cat([torch.zeros((n, 2), dtype=torch.int64), sizes_cpu], dim=1)
    full = torch.from_numpy(rng.integers(1, 400, (n, 2)))
    full[0] = sizes_cpu[0] // 3 + 1  # a strong downscale
    offsets = torch.from_numpy(rng.integers(-8, 40, (n, 2)))
    windows = torch.cat([offsets, full], dim=1)
    out_size = (int(rng.integers(1, 120)), int(rng.integers(1, 120)))
    out = F.resized_crop(images, sizes, boxes, out_size, windows=windows)
    for i, img in enumerate(imgs):
        ref = R.resized_window(img, boxes[i].tolist(), windows[i].tolist(), out_size)
        accs["resized_window"].add(ref, _sample(out, i, *out_size))
    crop = (int(rng.integers(8, 160)), int(rng.integers(8, 160)))
    resize = int(rng.integers(8, 200))
    t = ResizeCenterCrop(crop, resize_size=resize)
    result = t({"image": images, "sizes": sizes})
    for i, img in enumerate(imgs):
        ref = R.center_crop(R.resize_shorter(img, resize), crop)
        accs["resize_center_crop"].add(ref, _sample(result["image"], i, *crop))


def _filter_rows(accs: dict[str, RowAccumulator], rng: np.random.Generator,
                 imgs: list[np.ndarray], images: torch.Tensor, sizes: torch.Tensor,
                 sizes_cpu: torch.Tensor) -> None:
    """Bicubic and Lanczos: random boxes (up and down, odd sizes), windows of whole resizes
    and ``ResizeCrop`` (resize to cover, random crop) against Pillow's filter of that name."""
    from npu_data.transforms import ResizeCrop
    from npu_data.transforms import functional as F
    from npu_data.transforms.draws import sample_keys
    from npu_data.transforms.oracle import pillow as R

    n = len(imgs)
    for name in ("bicubic", "lanczos"):
        size = (int(rng.integers(1, 120)), int(rng.integers(1, 120)))
        boxes = _boxes(rng, sizes_cpu)
        out = F.resized_crop(images, sizes, boxes.to(images.device), size, interpolation=name)
        for i, img in enumerate(imgs):
            ref = R.resized_crop(img, boxes[i].tolist(), size, name)
            accs[f"resized_crop {name}"].add(ref, _sample(out, i, *size))
        whole = torch.cat([torch.zeros((n, 2), dtype=torch.int64), sizes_cpu], dim=1)
        full = torch.from_numpy(rng.integers(1, 400, (n, 2)))
        windows = torch.cat([torch.from_numpy(rng.integers(-8, 40, (n, 2))), full], dim=1)
        out = F.resized_crop(images, sizes, whole, size, windows=windows, interpolation=name)
        for i, img in enumerate(imgs):
            ref = R.resized_window(img, whole[i].tolist(), windows[i].tolist(), size, name)
            accs[f"resized_window {name}"].add(ref, _sample(out, i, *size))
        t = ResizeCrop(size, crop="random", interpolation=name)
        params = t.draw_keyed(sizes_cpu.numpy(), sample_keys(int(rng.integers(1 << 30)), 0,
                                                             np.arange(n)))
        result = t.apply({"image": images, "sizes": sizes}, params)
        for i, img in enumerate(imgs):
            ref = t.reference(img, params, i)
            accs[f"resize_crop {name}"].add(ref, _sample(result["image"], i, *size))


class _Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The suite's images as shard-like sample dicts (what ``ShardDataset`` serves)."""

    def __init__(self, images: list[np.ndarray]) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.images[i], "index": i}


def _loader_rows(acc: RowAccumulator, pipe: Any, imgs: list[np.ndarray], dev: torch.device,
                 seed: int) -> None:
    """End to end: the DataLoader's device batches (parameters drawn on the host, keyed by
    (seed, epoch, index)) against the reference replayed from each batch's ``aug``."""
    from npu_data.loaders import DataLoader
    from npu_data.transforms.oracle.replay import sample_image

    loader = DataLoader(_Samples(imgs), batch_size=max(1, len(imgs) // 2), shuffle=True,
                        device=dev, transform=pipe, seed=seed)
    for batch in loader:
        for j, i in enumerate(batch["index"].tolist()):
            ref = pipe.reference(imgs[i], batch["aug"], j)
            acc.add(ref, sample_image(batch, j))
