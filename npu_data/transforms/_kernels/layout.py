"""The torch ``hflip`` and ``normalize``: a gather per row, an elementwise affine map."""

from __future__ import annotations

import torch

from npu_data.transforms._kernels import to_device


def hflip(images: torch.Tensor, sizes: torch.Tensor, flip: torch.Tensor,
          inplace: bool = False) -> torch.Tensor:
    """Mirror each sample where ``flip (B,)`` within its valid width (always a new tensor:
    ``inplace`` only allows writing into ``images``)."""
    width = images.shape[-1]
    flip = to_device(flip, images.device).to(torch.bool).view(-1, 1)
    cols = torch.arange(width, device=images.device).view(1, width)
    w = to_device(sizes[:, 1], images.device).to(torch.int64).view(-1, 1)
    src = torch.where(flip & (cols < w), w - 1 - cols, cols)  # (B, W)
    index = src.view(-1, 1, 1, width).expand_as(images)
    return torch.gather(images, 3, index)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype,
              channels_last: bool) -> torch.Tensor:
    """``(images / 255 - mean) / std`` in float32, then ``dtype``; ``mean``/``std`` (C,)."""
    m, s = mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1)
    out = ((images.to(torch.float32) / 255.0 - m) / s).to(dtype)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out
