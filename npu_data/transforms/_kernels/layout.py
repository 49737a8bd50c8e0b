"""The torch ``hflip`` and ``normalize``: a gather per row, a lookup per value."""

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
    index = src.view(images.shape[0], 1, 1, width).expand_as(images)
    return torch.gather(images, 3, index)


def normalize_table(mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(C, 256): ``(v / 255 - mean) / std`` of every uint8 value ``v`` in float32, rounded once
    to ``dtype``, on ``mean``'s device: the ops normalisation always ran there, applied to the
    256 values instead of every pixel, so each entry has the bits the pixel-wise formula gives."""
    values = torch.arange(256, dtype=torch.float32, device=mean.device)
    return ((values / 255.0 - mean.view(-1, 1)) / std.view(-1, 1)).to(dtype)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype,
              channels_last: bool) -> torch.Tensor:
    """``(images / 255 - mean) / std`` in ``dtype`` as one lookup in :func:`normalize_table`:
    ``images + channel * 256`` (int32) indexes the flattened table; ``mean``/``std`` (C,)."""
    table = normalize_table(mean, std, dtype).view(-1)
    offsets = torch.arange(0, 256 * images.shape[1], 256, dtype=torch.int32,
                           device=images.device)
    if channels_last:  # the index, and so the output, in channels-last memory order
        images = images.contiguous(memory_format=torch.channels_last)
    return table[images + offsets.view(-1, 1, 1)]
