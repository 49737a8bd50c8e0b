"""Agreement between the device kernels and the Pillow CPU versions: the measures.

``compare_tensor`` measures two arrays; ``RowAccumulator`` folds many samples into one
``ParityRow`` against the budgets in ``TOLERANCES`` (and, for the torch kernels under each
reduced-precision mode of ``npu_data.parity.precision``, ``PRECISION_TOLERANCES``). The
suite that runs every kernel, the pipeline and the DataLoader is a tool:
``npu_data.parity.runner.run_parity_suite`` (``npu-data parity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "PRECISION_TOLERANCES",
    "TOLERANCES",
    "ParityReport",
    "ParityRow",
    "compare_tensor",
    "RowAccumulator",
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
    "resized_window": (0, 0.0),  # resize whole, keep a window (ResizeCrop, CenterCrop pads)
    "resize_center_crop": (0, 0.0),  # vs torchvision's PIL Resize(int) + CenterCrop
    # the other filters, exact: Pillow's Image.resize(BICUBIC / LANCZOS) of a box, of a whole
    # image kept in a window, and ResizeCrop (resize to cover, then the crop) with each
    "resized_crop bicubic": (0, 0.0),
    "resized_crop lanczos": (0, 0.0),
    "resized_window bicubic": (0, 0.0),
    "resized_window lanczos": (0, 0.0),
    "resize_crop bicubic": (0, 0.0),
    "resize_crop lanczos": (0, 0.0),
    "adjust_hue": (1, 0.1),
    "normalize": (1e-5, 1e-6),
    # the pixel augmentations: Pillow's integer arithmetic and float32 blends, exactly
    "rgb_to_grayscale": (0, 0.0),
    "erase": (0, 0.0),
    "erase_random": (0, 0.0),  # keyed per-pixel noise: integer hash + level table
    "posterize": (0, 0.0),
    "solarize": (0, 0.0),
    "invert": (0, 0.0),
    "equalize": (0, 0.0),
    "autocontrast": (0, 0.0),
    "adjust_sharpness": (0, 0.0),
    "permute_channels": (0, 0.0),
    "gaussian_blur": (1, 0.01),  # separable float32 passes vs torchvision's 2-D convolution
    # the policies (nearest warps), the SSD colour distortion, MixUp / CutMix (uint8). The
    # policies chain Pillow's floating-point enhance ops: exact on x86-64 (tests/transforms/
    # test_parity.py asserts 0 there), one level off in rare pixels on aarch64 (emulated
    # Kunpeng 920, 2026-12-06: max 1, mean 1.3e-4 levels), whose Pillow build computes them
    # differently
    "trivial_augment_wide": (1, 0.001),
    "rand_augment": (1, 0.001),
    "auto_augment": (1, 0.001),
    "photometric_distort": (0, 0.0),
    "mixup": (0, 0.0),
    "cutmix": (0, 0.0),
    "pipeline": (1, 0.1),
    "loader": (1, 0.1),
    # the warps (parity.geometric_rows): nearest is Pillow's integer arithmetic; bilinear
    # interpolates exactly where Pillow rounds in double (within one level, rarely off)
    "affine_nearest": (0, 0.0),
    "affine_bilinear": (1, 0.05),
    "rotate_nearest": (0, 0.0),
    "rotate_bilinear": (1, 0.05),
    "vflip": (0, 0.0),
    "zoom_out": (0, 0.0),  # RandomZoomOut vs Pillow's canvas paste (torchvision's pad)
    "scale_jitter": (0, 0.0),  # ScaleJitter vs Pillow's antialiased bilinear resize
    "iou_crop": (0, 0.0),  # RandomIoUCrop (chosen on the device) vs the crop of that box
}
"""Kernel -> (max abs difference in 8-bit levels, bound on the mean abs difference: the mean
must be below it, or exactly 0 when the bound is 0); ``normalize`` is in float units."""
# the torch kernels under TF32/HF32, bf16 matmuls or bf16 autocast (rows "<kernel> (torch,
# <mode>)"): they have no matmul, so the pixels are Pillow's exactly; normalize (float32 out)
# and the bilinear warps (integer kernels, Pillow's double) keep their budgets. The loader
# runs in its own processes and has no such rows.
_KEPT = ("normalize", "affine_bilinear", "rotate_bilinear", "gaussian_blur",
         "trivial_augment_wide", "rand_augment", "auto_augment")
PRECISION_TOLERANCES: dict[str, tuple[float, float]] = {
    k: (TOLERANCES[k] if k in _KEPT else (0, 0.0)) for k in TOLERANCES if k != "loader"
}
"""``TOLERANCES`` of the torch kernels under TF32/HF32, bf16 matmuls or bf16 autocast: exact
(they have no matmul), ``normalize`` the bilinear warps and ``gaussian_blur`` keeping their budgets; no
``loader`` row."""


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
    """How far ``actual`` is from ``expected`` (made by ``compare_tensor``).

    Attributes:
        shape: The compared shape.
        dtype: The dtype, ``"expected/actual"`` when they differ (``"uint8"``,
            ``"float32/bfloat16"``).
        numel: Number of values compared.
        max_abs: Largest absolute difference (raw units).
        mean_abs: Mean absolute difference (raw units).
        frac_off_gt1: Fraction of values off by more than one 8-bit level.
        cosine: Cosine similarity of the two, flattened (1.0 when both are all zero).
        allclose: ``torch.allclose(actual, expected, rtol, atol)``.
        passed: The verdict: ``allclose``.
    """

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

    ``frac_off_gt1`` counts values off by more than one 8-bit level: the raw difference for
    uint8 inputs; for floats, the difference times 255 when both look 0..1 scaled, the raw
    difference otherwise.

    Args:
        expected: The reference: a torch tensor or numpy array.
        actual: The result to check, of the same shape (any dtype, any device).
        rtol: Relative tolerance of ``torch.allclose``.
        atol: Absolute tolerance of ``torch.allclose``; default 1.0 for uint8, 1e-5
            otherwise.

    Returns:
        The measures; ``passed`` is ``torch.allclose(actual, expected, rtol, atol)``.

    Raises:
        ValueError: The shapes differ.
        TypeError: An input is neither a torch tensor nor a numpy array.
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
    """Whether measured differences meet a kernel's budget.

    Args:
        kernel: A key of ``TOLERANCES``.
        max_abs: The largest absolute difference measured.
        mean_abs: The mean absolute difference measured.
        tolerance: (max, mean bound); default ``TOLERANCES[kernel]``.

    Returns:
        True when ``max_abs <= max`` and ``mean_abs`` is below the bound (exactly 0 when the
        bound is 0).
    """
    max_tol, mean_tol = TOLERANCES[kernel] if tolerance is None else tolerance
    mean_ok = mean_abs == 0.0 if mean_tol == 0 else mean_abs < mean_tol
    return max_abs <= max_tol and mean_ok


def tolerance_text(kernel: str, tolerance: tuple[float, float] | None = None) -> str:
    """A kernel's budget for people.

    Args:
        kernel: A key of ``TOLERANCES``.
        tolerance: (max, mean bound); default ``TOLERANCES[kernel]``.

    Returns:
        ``"max<=1, mean<0.1"``, or ``"exact"`` for a zero budget.
    """
    max_tol, mean_tol = TOLERANCES[kernel] if tolerance is None else tolerance
    if max_tol == 0 and mean_tol == 0:
        return "exact"
    return f"max<={max_tol:g}, mean<{mean_tol:g}"


@dataclass(frozen=True)
class ParityRow:
    """One kernel's agreement over every sample the suite ran (``RowAccumulator.row``).

    Attributes:
        kernel: The kernel (a key of ``TOLERANCES``, or ``"<kernel> (torch, <mode>)"``).
        max: Largest absolute difference over all samples.
        mean: Mean absolute difference over all values.
        frac: Fraction of values off by more than one 8-bit level.
        samples: Samples compared.
        tolerance: The budget, as ``tolerance_text`` writes it.
        passed: Whether ``max`` and ``mean`` meet the budget.
    """

    kernel: str
    max: float
    mean: float
    frac: float
    samples: int
    tolerance: str
    passed: bool


class RowAccumulator:
    """Accumulates per-sample comparisons (``add``) into one ``ParityRow`` (``row``).

    Args:
        kernel: The row's kernel name.
        tolerance: (max, mean bound) the row is judged against.
    """

    def __init__(self, kernel: str, tolerance: tuple[float, float]) -> None:
        self.kernel, self.tolerance = kernel, tolerance
        self.max, self.total, self.off, self.numel, self.samples = 0.0, 0.0, 0.0, 0, 0

    def add(self, expected: Any, actual: Any) -> None:
        """Compare one sample (``compare_tensor``) and fold it into the row."""
        r = compare_tensor(expected, actual)
        self.max = max(self.max, r.max_abs)
        self.total += r.mean_abs * r.numel
        self.off += r.frac_off_gt1 * r.numel
        self.numel += r.numel
        self.samples += 1

    def row(self) -> ParityRow:
        """The row over every sample added so far."""
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
