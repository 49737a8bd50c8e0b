"""The torch ``color_jitter``: several colour ops per sample, each sample in its own order.

Op ids: 0 brightness, 1 contrast, 2 saturation, 3 hue. With one order for the whole batch,
one pass per op. With a per-sample order, ONE hue pass: the blends before each sample's hue
step, hue, then the blends after it; each blend step is one fused pass whose first image is
chosen per sample (black, the grey mean, or the pixel's grey), and factor 1 is an exact
identity, so a sample with nothing to do at a step stays unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from npu_data.transforms._kernels import color as K
from npu_data.transforms._kernels import to_device

HUE = 3


def _one_op(x: torch.Tensor, sizes: torch.Tensor, op: int, factors: torch.Tensor,
            shifts: torch.Tensor) -> torch.Tensor:
    if op == 0:
        return K.adjust_brightness(x, sizes, factors[:, 0])
    if op == 1:
        return K.adjust_contrast(x, sizes, factors[:, 1])
    if op == 2:
        return K.adjust_saturation(x, sizes, factors[:, 2])
    return K.adjust_hue(x, sizes, shifts)


def _fused_blend(x: torch.Tensor, sizes: torch.Tensor, op: torch.Tensor, factors: torch.Tensor,
                 active: torch.Tensor) -> torch.Tensor:
    """Brightness (op 0), contrast (1) or saturation (2) per sample, where ``active``."""
    gray = K.grayscale(x)  # (B, 1, H, W) int32
    mask = K.valid_mask(sizes, x.shape[-2], x.shape[-1])
    mean = K.gray_mean(gray, sizes, mask)
    sel = op.view(-1, 1, 1, 1)
    in1 = torch.where(sel == 2, gray, torch.where(sel == 1, mean.view(-1, 1, 1, 1), 0))
    alpha = torch.gather(factors, 1, op.view(-1, 1).clamp(0, 2)).squeeze(1)
    alpha = torch.where(active, alpha, torch.ones_like(alpha))
    out = K.blend(in1.expand_as(x), x, alpha)
    # like adjust_contrast, contrast leaves the padding at 0
    zero_pad = (active & (op == 1)).view(-1, 1, 1, 1) & ~mask
    return torch.where(zero_pad, torch.zeros((), dtype=out.dtype, device=out.device), out)


def color_jitter(images: torch.Tensor, sizes: torch.Tensor, ops: Sequence[int],
                 order: torch.Tensor | None, factors: torch.Tensor, shifts: torch.Tensor,
                 inplace: bool = False) -> torch.Tensor:
    """``ops`` in play (host ints); ``order (B, len(ops))`` each sample's permutation of them
    or None (``ops`` in that order for all); ``factors (B, 3)``; hue ``shifts (B,)``. Always a
    new tensor (``inplace`` only allows writing into ``images``)."""
    x = images
    sizes = to_device(sizes, x.device)
    if order is None or len(ops) <= 1:  # the order is known: one pass per op
        for op in ops:
            x = _one_op(x, sizes, op, factors, shifts)
        return x
    order = to_device(order, x.device)
    n = order.shape[1]
    if HUE not in ops:
        every = torch.ones(order.shape[0], dtype=torch.bool, device=x.device)
        for k in range(n):
            x = _fused_blend(x, sizes, order[:, k], factors, every)
        return x
    steps = torch.arange(n - 1, device=x.device).view(1, -1)
    hue_at = torch.argmax((order == HUE).to(torch.int64), dim=1, keepdim=True)  # (B, 1)
    blends = torch.gather(order, 1, steps + (steps >= hue_at).to(steps.dtype))  # (B, n-1)
    for k in range(n - 1):  # before hue
        x = _fused_blend(x, sizes, blends[:, k], factors, k < hue_at[:, 0])
    x = K.adjust_hue(x, sizes, shifts)
    for k in range(n - 1):  # after hue
        x = _fused_blend(x, sizes, blends[:, k], factors, k >= hue_at[:, 0])
    return x
