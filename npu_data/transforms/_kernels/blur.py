"""The torch ``gaussian_blur``: two separable float32 passes, reflecting inside each valid image.

torchvision's kernel is the outer product of two 1-D Gaussians (``softmax(-x**2)`` over
``kernel_size`` points), convolved with the reflect-padded float32 image and rounded half to
even. Here each axis is one pass of ``kernel_size`` taps: a gather of the reflected column (or
row) of every pixel times the sample's weight, summed in float32 — no convolution or matmul,
so TF32/bf16 settings cannot reach it. The sums differ from the 2-D convolution's only in
float32 rounding, so a result can be one level off where the exact value is within about
1e-4 of a half (parity bound: 1 level).
"""

from __future__ import annotations

import math

import torch

from npu_data.transforms._kernels import to_device
from npu_data.transforms._kernels.pixel import valid_mask


def kernel1d(kernel_size: int, sigma: torch.Tensor) -> torch.Tensor:
    """(B, k) float32 weights for ``sigma (B,)``: torchvision's ``linspace(-lim, lim, k)``
    (start + i * step in the first half, end - (k - 1 - i) * step in the second) and
    ``softmax(-x**2)``."""
    s = sigma.to(torch.float32).view(-1, 1)
    if kernel_size == 1:
        return torch.ones_like(s)
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0)) / s  # (B, 1)
    step = (2.0 * lim) / (kernel_size - 1)
    i = torch.arange(kernel_size, device=s.device, dtype=torch.float32).view(1, -1)
    first = -lim + i * step
    second = lim - (kernel_size - 1 - i) * step
    x = torch.where(i < kernel_size // 2, first, second)
    return torch.softmax(-(x * x), dim=1)


def reflect_index(length: torch.Tensor, extent: int, taps: int) -> torch.Tensor:
    """(B, extent, taps) int64: for output position ``j`` and tap ``t`` the source
    ``j + t - taps // 2`` reflected into ``[0, length)`` of each sample (numpy's ``reflect``:
    periodic with period ``2 (length - 1)``; a 1-px image repeats its pixel)."""
    n = length.to(torch.int64).view(-1, 1, 1)
    j = torch.arange(extent, device=n.device).view(1, -1, 1)
    t = torch.arange(taps, device=n.device).view(1, 1, -1)
    period = (2 * (n - 1)).clamp(min=1)
    m = torch.remainder(j + t - taps // 2, period)
    return torch.where(m >= n, period - m, m).clamp(max=extent - 1)


def _pass(x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor, dim: int
          ) -> torch.Tensor:
    """One axis: ``sum_t weights[:, t] * x[..., index[:, :, t] ...]`` along ``dim`` (2 or 3)."""
    b = x.shape[0]
    acc = torch.zeros_like(x)
    for t in range(weights.shape[1]):
        idx = index[:, :, t]
        n = idx.shape[1]  # no -1: an empty batch has no size to infer
        idx = idx.view(b, 1, n, 1) if dim == 2 else idx.view(b, 1, 1, n)
        acc = acc + weights[:, t].view(b, 1, 1, 1) * torch.gather(x, dim, idx.expand_as(x))
    return acc


def gaussian_blur(images: torch.Tensor, sizes: torch.Tensor, kernel_size: tuple[int, int],
                  sigma: torch.Tensor) -> torch.Tensor:
    """Blur each sample with ``sigma (B,)`` on both axes; ``kernel_size`` (kx, ky)."""
    kx, ky = kernel_size
    height, width = images.shape[2:]
    dev = images.device
    s = to_device(sigma, dev)
    size = to_device(sizes, dev)
    x = images.to(torch.float32)
    x = _pass(x, kernel1d(kx, s), reflect_index(size[:, 1], width, kx), 3)
    x = _pass(x, kernel1d(ky, s), reflect_index(size[:, 0], height, ky), 2)
    out = x.round().clamp(0.0, 255.0).to(torch.uint8)
    return torch.where(valid_mask(size, height, width, dev), out,
                       torch.zeros((), dtype=torch.uint8, device=dev))
