"""The torch kernels of MixUp / CutMix and the per-sample choices: gathers and selects only."""

from __future__ import annotations

import torch

from npu_data.transforms._kernels import to_device


def mixup(images: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``partner * (1 - lam) + x * lam`` in float32 (torchvision's order); uint8 rounded half to
    even, float batches kept in their dtype."""
    b = images.shape[0]
    p = to_device(partner, images.device).to(torch.int64)
    w = to_device(lam, images.device).to(torch.float32).view(b, 1, 1, 1)
    x = images.to(torch.float32) if images.dtype == torch.uint8 else images
    mixed = x[p] * (1.0 - w) + x * w
    if images.dtype == torch.uint8:
        return mixed.round().clamp(0.0, 255.0).to(torch.uint8)
    return mixed.to(images.dtype)


def cutmix(images: torch.Tensor, partner: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Each sample's ``boxes (B, 4)`` (top, left, height, width) taken from its partner."""
    height, width = images.shape[2:]
    dev = images.device
    box = to_device(boxes, dev).to(torch.int64)
    rows = torch.arange(height, device=dev).view(1, -1)
    cols = torch.arange(width, device=dev).view(1, -1)
    in_r = (rows >= box[:, 0:1]) & (rows < box[:, 0:1] + box[:, 2:3])
    in_c = (cols >= box[:, 1:2]) & (cols < box[:, 1:2] + box[:, 3:4])
    inside = (in_r.unsqueeze(2) & in_c.unsqueeze(1)).unsqueeze(1)
    p = to_device(partner, dev).to(torch.int64)
    return torch.where(inside, images[p], images)


def soft_labels(labels: torch.Tensor, partner: torch.Tensor, weight: torch.Tensor,
                num_classes: int | None) -> torch.Tensor:
    """``(B, classes)`` float32: ``weight`` of each one-hot (or given) row plus ``1 - weight``
    of its partner's."""
    b = labels.shape[0]
    dev = labels.device
    if num_classes is None:
        rows = labels.to(torch.float32)
    else:
        rows = torch.zeros((b, num_classes), dtype=torch.float32, device=dev)
        rows.scatter_(1, labels.to(torch.int64).view(b, 1), 1.0)
    p = to_device(partner, dev).to(torch.int64)
    w = to_device(weight, dev).to(torch.float32).view(b, 1)
    return rows[p] * (1.0 - w) + rows * w


def choose(mask: torch.Tensor, images: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """``images`` where ``mask (B,)``, ``others`` elsewhere."""
    m = to_device(mask, images.device).to(torch.bool).view(-1, *([1] * (images.ndim - 1)))
    return torch.where(m, images, others)


def permute_channels(images: torch.Tensor, sizes: torch.Tensor, permutation: torch.Tensor
                     ) -> torch.Tensor:
    """Output channel ``c`` of sample ``b`` is its input channel ``permutation[b, c]``."""
    b = images.shape[0]
    p = to_device(permutation, images.device).to(torch.int64)
    return torch.gather(images, 1, p.view(b, p.shape[-1], 1, 1).expand_as(images))
