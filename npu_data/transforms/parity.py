"""Agreement between the device kernels and the Pillow CPU versions.

:func:`compare_tensor` measures two arrays; :func:`run_parity_suite` runs every kernel of
:mod:`npu_data.transforms.functional` (and a full augmentation pipeline) on random padded
batches on a device and compares each sample's valid region with
:mod:`npu_data.transforms.reference`, against the budgets in :data:`TOLERANCES`; the torch
kernels (the device path) also under each reduced-precision mode of
:mod:`npu_data.transforms.precision`, against :data:`PRECISION_TOLERANCES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data.device import DeviceLike, resolve_device
from npu_data.errors import UserError

__all__ = [
    "PRECISION_TOLERANCES",
    "TOLERANCES",
    "ParityReport",
    "ParityRow",
    "compare_tensor",
    "run_parity_suite",
    "tolerance_text",
    "within",
]

# kernel -> (max abs difference in 8-bit levels, bound on the mean abs difference: the mean
# must be < bound, or exactly 0 when the bound is 0). "normalize" is in float units.
TOLERANCES: dict[str, tuple[float, float]] = {
    "hflip": (0, 0.0),
    "adjust_brightness": (0, 0.0),
    "adjust_contrast": (0, 0.0),
    "adjust_saturation": (0, 0.0),
    "resized_crop": (1, 0.1),
    "adjust_hue": (1, 0.1),
    "normalize": (1e-5, 1e-6),
    "pipeline": (1, 0.1),
    "loader": (1, 0.1),
}
# the torch kernels under TF32/HF32, bf16 matmuls or bf16 autocast (rows "<kernel> (torch,
# <mode>)"): they have no matmul, so the pixels are Pillow's exactly; normalize (float32 out)
# keeps its budget. The loader runs in its own processes and has no such rows.
PRECISION_TOLERANCES: dict[str, tuple[float, float]] = {
    k: (TOLERANCES[k] if k == "normalize" else (0, 0.0)) for k in TOLERANCES if k != "loader"
}


def _to_cpu(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu")
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    raise TypeError(
        f"compare_tensor: expected a torch tensor or numpy array, got {type(x).__name__}"
    )


@dataclass(frozen=True)
class ParityReport:
    """How far ``actual`` is from ``expected`` (see :func:`compare_tensor`)."""

    shape: tuple[int, ...]
    dtype: str
    numel: int
    max_abs: float
    mean_abs: float
    frac_off_gt1: float
    cosine: float
    allclose: bool
    passed: bool

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict} shape={self.shape} dtype={self.dtype} max_abs={self.max_abs:.6g} "
            f"mean_abs={self.mean_abs:.6g} frac>1level={self.frac_off_gt1:.4%} "
            f"cosine={self.cosine:.8f} allclose={self.allclose}"
        )


def compare_tensor(
    expected: Any, actual: Any, rtol: float = 1e-3, atol: float | None = None
) -> ParityReport:
    """Compare two tensors/arrays (any device) in float64 on the CPU.

    ``frac_off_gt1`` is the fraction of values off by more than one 8-bit level: the raw
    difference for uint8 inputs; for floats, the difference times 255 when both look 0..1
    scaled, the raw difference otherwise. ``atol`` defaults to 1.0 for uint8, 1e-5 otherwise;
    ``passed`` is ``torch.allclose(actual, expected, rtol, atol)``.
    Raises ValueError when the shapes differ.
    """
    e_raw, a_raw = _to_cpu(expected), _to_cpu(actual)
    if tuple(e_raw.shape) != tuple(a_raw.shape):
        raise ValueError(
            f"compare_tensor: shape mismatch, expected {tuple(e_raw.shape)} "
            f"vs actual {tuple(a_raw.shape)}"
        )
    is_uint8 = e_raw.dtype == torch.uint8 and a_raw.dtype == torch.uint8
    dtype = str(e_raw.dtype).removeprefix("torch.")
    if a_raw.dtype != e_raw.dtype:
        dtype += "/" + str(a_raw.dtype).removeprefix("torch.")
    e, a = e_raw.to(torch.float64), a_raw.to(torch.float64)
    if atol is None:
        atol = 1.0 if is_uint8 else 1e-5
    n = e.numel()
    if n == 0:
        return ParityReport(tuple(e.shape), dtype, 0, 0.0, 0.0, 0.0, 1.0, True, True)
    diff = (a - e).abs()
    if is_uint8:
        levels = diff
    else:
        unit = bool(e.min() >= 0 and e.max() <= 1 and a.min() >= 0 and a.max() <= 1)
        levels = diff * 255.0 if unit else diff
    ne, na = float(torch.linalg.vector_norm(e)), float(torch.linalg.vector_norm(a))
    if ne == 0.0 and na == 0.0:
        cosine = 1.0
    elif ne == 0.0 or na == 0.0:
        cosine = 0.0
    else:
        cosine = float((e.flatten() @ a.flatten()) / (ne * na))
    close = bool(torch.allclose(a, e, rtol=rtol, atol=atol))
    return ParityReport(
        shape=tuple(e.shape),
        dtype=dtype,
        numel=n,
        max_abs=float(diff.max()),
        mean_abs=float(diff.mean()),
        frac_off_gt1=float((levels > 1.0).to(torch.float64).mean()),
        cosine=cosine,
        allclose=close,
        passed=close,
    )


def within(kernel: str, max_abs: float, mean_abs: float,
           tolerance: tuple[float, float] | None = None) -> bool:
    """True when ``max_abs`` / ``mean_abs`` meet ``tolerance`` (``TOLERANCES[kernel]``)."""
    max_tol, mean_tol = TOLERANCES[kernel] if tolerance is None else tolerance
    mean_ok = mean_abs == 0.0 if mean_tol == 0 else mean_abs < mean_tol
    return max_abs <= max_tol and mean_ok


def tolerance_text(kernel: str, tolerance: tuple[float, float] | None = None) -> str:
    """``tolerance`` (``TOLERANCES[kernel]``) for people: ``max<=1, mean<0.1`` or ``exact``."""
    max_tol, mean_tol = TOLERANCES[kernel] if tolerance is None else tolerance
    if max_tol == 0 and mean_tol == 0:
        return "exact"
    return f"max<={max_tol:g}, mean<{mean_tol:g}"


@dataclass(frozen=True)
class ParityRow:
    """One kernel's agreement over every sample the suite ran."""

    kernel: str
    max: float
    mean: float
    frac: float
    samples: int
    tolerance: str
    passed: bool


class _Acc:
    """Accumulates per-sample reports into one row."""

    def __init__(self, kernel: str, tolerance: tuple[float, float]) -> None:
        self.kernel, self.tolerance = kernel, tolerance
        self.max, self.total, self.off, self.numel, self.samples = 0.0, 0.0, 0.0, 0, 0

    def add(self, expected: Any, actual: Any) -> None:
        r = compare_tensor(expected, actual)
        self.max = max(self.max, r.max_abs)
        self.total += r.mean_abs * r.numel
        self.off += r.frac_off_gt1 * r.numel
        self.numel += r.numel
        self.samples += 1

    def row(self) -> ParityRow:
        mean = self.total / self.numel if self.numel else 0.0
        frac = self.off / self.numel if self.numel else 0.0
        return ParityRow(
            self.kernel,
            self.max,
            mean,
            frac,
            self.samples,
            tolerance_text(self.kernel, self.tolerance),
            within(self.kernel, self.max, mean, self.tolerance),
        )


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
    of :data:`npu_data.transforms.precision.MODES` that ``device`` has: rows
    ``"<kernel> (torch, <mode>)"`` (no loader row).
    """
    from dataclasses import replace

    from npu_data.transforms import _dispatch, _native
    from npu_data.transforms._kernels import accelerator_path
    from npu_data.transforms.precision import MODES, reduced_precision

    if batches < 1 or batch_size < 1:
        raise UserError(f"run_parity_suite: batches and batch_size must be >= 1, got {batches} "
                        f"and {batch_size}")
    dev = resolve_device(device)
    rows = _run_suite(dev, seed, batches, batch_size, TOLERANCES)
    if _dispatch.compiled_for(torch.empty(0, device=dev)):
        with _native.disabled():
            rows += [replace(r, kernel=f"{r.kernel} (torch)")
                     for r in _run_suite(dev, seed, batches, batch_size, TOLERANCES)]
    for mode, (_, _, autocast) in MODES.items() if precision else ():
        if autocast and not torch.amp.is_autocast_available(dev.type):
            continue
        with accelerator_path(), reduced_precision(mode, dev):
            rows += [replace(r, kernel=f"{r.kernel} (torch, {mode})") for r in
                     _run_suite(dev, seed, batches, batch_size, PRECISION_TOLERANCES)]
    return rows


def _run_suite(dev: torch.device, seed: int, batches: int, batch_size: int,
               tolerances: dict[str, tuple[float, float]]) -> list[ParityRow]:
    from npu_data.device import manual_seed
    from npu_data.transforms import functional as F
    from npu_data.transforms import reference as R
    from npu_data.transforms.replay import replay_reference, sample_image

    rng = np.random.default_rng(seed)
    accs = {k: _Acc(k, tol) for k, tol in tolerances.items()}
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
        # the pipeline: parameters drawn on the device, replayed per sample on the reference
        batch = {"image": images, "sizes": sizes}
        result, params = pipe.run(batch, manual_seed(seed * 1000 + b, dev))
        for i in range(batch_size):
            ref = replay_reference(pipe, sample_image(batch, i), params, i)
            accs["pipeline"].add(ref, sample_image(result, i))
        if "loader" in accs:
            _loader_rows(accs["loader"], pipe, imgs, dev, seed + b)
    return [acc.row() for acc in accs.values()]


class _Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The suite's images as shard-like sample dicts (what ``ShardDataset`` serves)."""

    def __init__(self, images: list[np.ndarray]) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.images[i], "index": i}


def _loader_rows(acc: _Acc, pipe: Any, imgs: list[np.ndarray], dev: torch.device,
                 seed: int) -> None:
    """End to end: the DataLoader's device batches (parameters drawn on the host, keyed by
    (seed, epoch, index)) against the reference replayed from each batch's ``aug``."""
    from npu_data.loaders import DataLoader
    from npu_data.transforms.replay import sample_image

    loader = DataLoader(_Samples(imgs), batch_size=max(1, len(imgs) // 2), shuffle=True,
                        device=dev, transform=pipe, seed=seed)
    for batch in loader:
        for j, i in enumerate(batch["index"].tolist()):
            ref = pipe.apply_reference(imgs[i], batch["aug"], j)
            acc.add(ref, sample_image(batch, j))
