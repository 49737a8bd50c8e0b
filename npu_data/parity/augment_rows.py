"""The parity suite's rows for the pixel augmentations, the auto-augment policies and MixUp /
CutMix (``npu-data parity``): each kernel with random per-sample parameters, each transform
with parameters drawn on the device and replayed sample by sample on the Pillow reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from npu_data.transforms.oracle.measures import RowAccumulator

OPS = ("rgb_to_grayscale", "erase", "erase_random", "posterize", "solarize", "invert", "equalize",
       "autocontrast", "adjust_sharpness", "gaussian_blur", "permute_channels")
TRANSFORMS = ("trivial_augment_wide", "rand_augment", "auto_augment", "photometric_distort",
              "mixup", "cutmix")


def _sample(out: torch.Tensor, i: int, h: int, w: int) -> np.ndarray:
    return out[i, :, :h, :w].permute(1, 2, 0).cpu().numpy()


def _op_cases(rng: np.random.Generator, n: int, hw: list[list[int]], dev: torch.device
              ) -> dict[str, tuple[Callable[..., torch.Tensor], Callable[..., np.ndarray]]]:
    from npu_data.transforms import functional as F
    from npu_data.transforms.oracle import pillow as R

    mask = torch.from_numpy(rng.random(n) < 0.5)
    boxes = torch.tensor([[int(rng.integers(0, h)), int(rng.integers(0, w)),
                           int(rng.integers(0, h + 1)), int(rng.integers(0, w + 1))]
                          for h, w in hw])
    value = torch.from_numpy(rng.integers(0, 256, (n, 3)))
    seeds = torch.from_numpy(rng.integers(0, 1 << 32, n, dtype=np.int64))
    bits = torch.from_numpy(rng.integers(0, 9, n))
    thr = torch.from_numpy(rng.uniform(0, 256, n).astype(np.float32))
    fac = torch.from_numpy(rng.uniform(0, 2, n).astype(np.float32))
    sigma = torch.from_numpy(rng.uniform(0.1, 3.0, n).astype(np.float32))
    ks = (int(rng.integers(0, 6)) * 2 + 1, int(rng.integers(0, 6)) * 2 + 1)
    perm = torch.from_numpy(np.argsort(rng.random((n, 3)), axis=1))

    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(dev)

    return {
        "rgb_to_grayscale": (lambda x, s: F.rgb_to_grayscale(x, s, on(mask)),
                             lambda i, im: R.rgb_to_grayscale(im) if mask[i] else im),
        "erase": (lambda x, s: F.erase(x, s, on(boxes), on(value)),
                  lambda i, im: R.erase(im, boxes[i].tolist(), value[i].tolist())),
        "erase_random": (lambda x, s: F.erase(x, s, on(boxes), "random", noise_seeds=on(seeds)),
                         lambda i, im: R.erase(im, boxes[i].tolist(), "random",
                                               seed=int(seeds[i]))),
        "posterize": (lambda x, s: F.posterize(x, s, on(bits)),
                      lambda i, im: R.posterize(im, int(bits[i]))),
        "solarize": (lambda x, s: F.solarize(x, s, on(thr)),
                     lambda i, im: R.solarize(im, float(thr[i]))),
        "invert": (F.invert, lambda i, im: R.invert(im)),
        "equalize": (F.equalize, lambda i, im: R.equalize(im)),
        "autocontrast": (F.autocontrast, lambda i, im: R.autocontrast(im)),
        "adjust_sharpness": (lambda x, s: F.adjust_sharpness(x, s, on(fac)),
                             lambda i, im: R.adjust_sharpness(im, float(fac[i]))),
        "gaussian_blur": (lambda x, s: F.gaussian_blur(x, s, ks, on(sigma)),
                          lambda i, im: R.gaussian_blur(im, ks, float(sigma[i]))),
        "permute_channels": (lambda x, s: F.permute_channels(x, s, on(perm)),
                             lambda i, im: im[:, :, perm[i].numpy()]),
    }


def augment_rows(accs: dict[str, RowAccumulator], rng: np.random.Generator,
                 imgs: list[np.ndarray], images: torch.Tensor, sizes: torch.Tensor,
                 generator: Callable[[int], torch.Generator]) -> None:
    """Fold this batch's samples into the rows of :data:`OPS` and :data:`TRANSFORMS` present
    in ``accs``; ``generator(k)`` gives a seeded generator on the batch's device."""
    hw = [list(img.shape[:2]) for img in imgs]
    for name, (kernel, ref) in _op_cases(rng, len(imgs), hw, images.device).items():
        if name in accs:
            out = kernel(images, sizes)
            for i, img in enumerate(imgs):
                accs[name].add(ref(i, img), _sample(out, i, *hw[i]))
    _transform_rows(accs, imgs, images, sizes, generator)
    _mixing_rows(accs, images, sizes, generator)


def _transform_rows(accs: dict[str, RowAccumulator], imgs: list[np.ndarray],
                    images: torch.Tensor, sizes: torch.Tensor,
                    generator: Callable[[int], torch.Generator]) -> None:
    from npu_data.transforms import (
        AutoAugment,
        RandAugment,
        RandomPhotometricDistort,
        TrivialAugmentWide,
    )

    transforms: dict[str, Any] = {
        "trivial_augment_wide": TrivialAugmentWide(), "rand_augment": RandAugment(num_ops=3),
        "auto_augment": AutoAugment(), "photometric_distort": RandomPhotometricDistort(p=0.7)}
    batch = {"image": images, "sizes": sizes}
    for k, (name, t) in enumerate(transforms.items()):
        if name not in accs:
            continue
        result, params = t.run(batch, generator(k))
        for i, img in enumerate(imgs):
            ref = t.reference(img, params, i)
            accs[name].add(ref, _sample(result["image"], i, *ref.shape[:2]))


def _mixing_rows(accs: dict[str, RowAccumulator], images: torch.Tensor, sizes: torch.Tensor,
                 generator: Callable[[int], torch.Generator]) -> None:
    """MixUp / CutMix on samples of one size (each resized whole to 40x56 first)."""
    from npu_data.transforms import CutMix, MixUp
    from npu_data.transforms import functional as F

    if "mixup" not in accs and "cutmix" not in accs:
        return
    n = images.shape[0]
    whole = torch.cat([torch.zeros((n, 2), dtype=torch.int64), sizes.cpu()], 1)
    same = F.resized_crop(images, sizes, whole.to(images.device), (40, 56))
    batch = {"image": same, "sizes": torch.tensor([[40, 56]] * n).to(images.device),
             "label": (torch.arange(n) % 5).to(images.device)}
    imgs = [_sample(same, i, 40, 56) for i in range(n)]
    for k, (name, t) in enumerate((("mixup", MixUp(0.4, 5)), ("cutmix", CutMix(1.0, 5)))):
        if name not in accs:
            continue
        result, params = t.run(batch, generator(10 + k))
        for i, ref in enumerate(t.mix_reference(imgs, params)):
            accs[name].add(ref, _sample(result["image"], i, 40, 56))
