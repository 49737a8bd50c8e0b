"""The torch kernels of MixUp / CutMix and the per-sample choices: gathers and selects only."""

from __future__ import annotations

import torch

from npu_data.transforms._kernels import on_host, riding, take, to_device


def weights(partner: torch.Tensor, weight: torch.Tensor, name: str
            ) -> dict[str, torch.Tensor]:
    """The partners (B,) int64, a weight ``w`` (B,) float32 and ``1 - w`` (float32, the same
    rounding wherever it is computed) where ``partner`` and ``weight`` live, named for
    :func:`~npu_data.transforms._kernels.take`."""
    w = weight.to(torch.float32)
    return {"mix.partner": partner.to(torch.int64), name: w, f"{name}.rest": 1.0 - w}


def _on(parts: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``parts`` on ``device``: host ones in one copy (or riding with an earlier one)."""
    if not on_host(*parts.values()):
        return {k: to_device(v, device) for k, v in parts.items()}
    with riding(parts):
        return {k: take(k, v, device) for k, v in parts.items()}


def mixup(images: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``partner * (1 - lam) + x * lam`` in float32 (torchvision's order); uint8 rounded half to
    even, float batches kept in their dtype."""
    b = images.shape[0]
    parts = _on(weights(partner, lam, "mix.lam"), images.device)
    p = parts["mix.partner"]
    w, rest = parts["mix.lam"].view(b, 1, 1, 1), parts["mix.lam.rest"].view(b, 1, 1, 1)
    x = images.to(torch.float32) if images.dtype == torch.uint8 else images
    mixed = x[p] * rest + x * w
    if images.dtype == torch.uint8:
        return mixed.round().clamp(0.0, 255.0).to(torch.uint8)
    return mixed.to(images.dtype)


def cutmix(images: torch.Tensor, partner: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Each sample's ``boxes (B, 4)`` (top, left, height, width) taken from its partner."""
    height, width = images.shape[2:]
    parts = _on(cut_parts(partner, boxes, height, width), images.device)
    inside = (parts["cut.rows"].unsqueeze(2) & parts["cut.cols"].unsqueeze(1)).unsqueeze(1)
    return torch.where(inside, images[parts["mix.partner"]], images)


def cut_parts(partner: torch.Tensor, boxes: torch.Tensor, height: int, width: int
              ) -> dict[str, torch.Tensor]:
    """CutMix's partners and each sample's rows (B, H) and columns (B, W) inside its box,
    made where ``boxes`` live."""
    dev = boxes.device
    box = boxes.to(torch.int64)
    rows = torch.arange(height, device=dev).view(1, -1)
    cols = torch.arange(width, device=dev).view(1, -1)
    return {"mix.partner": to_device(partner, dev).to(torch.int64),
            "cut.rows": (rows >= box[:, 0:1]) & (rows < box[:, 0:1] + box[:, 2:3]),
            "cut.cols": (cols >= box[:, 1:2]) & (cols < box[:, 1:2] + box[:, 3:4])}


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
    parts = _on(weights(partner, weight, "mix.label"), dev)
    w, rest = parts["mix.label"].view(b, 1), parts["mix.label.rest"].view(b, 1)
    return rows[parts["mix.partner"]] * rest + rows * w


def choose(mask: torch.Tensor, images: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """``images`` where ``mask (B,)``, ``others`` elsewhere."""
    m = take("choose.mask", mask.to(torch.bool), images.device).view(
        -1, *([1] * (images.ndim - 1)))
    return torch.where(m, images, others)


def permute_channels(images: torch.Tensor, sizes: torch.Tensor, permutation: torch.Tensor
                     ) -> torch.Tensor:
    """Output channel ``c`` of sample ``b`` is its input channel ``permutation[b, c]``."""
    b = images.shape[0]
    p = to_device(permutation, images.device).to(torch.int64)
    return torch.gather(images, 1, p.view(b, p.shape[-1], 1, 1).expand_as(images))
