"""The torch ``hflip`` and ``normalize``: a gather per row, a lookup per value."""

from __future__ import annotations

import threading

import torch

from npu_data.transforms._kernels import compiling, host_values, to_device

_MADE: dict[tuple[object, ...], tuple[torch.Tensor, torch.Tensor]] = {}  # tables made on a device, by what makes them
_LOCK = threading.Lock()


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


def _tables(mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype, channels: int,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The flattened :func:`normalize_table` and the channel offsets ``(C,)`` int32 on
    ``device``: made there once per (mean, std, dtype, device) where ``mean`` and ``std`` are
    host values (the same device ops, run once: the same bits), else made now."""
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        table = normalize_table(to_device(mean, device), to_device(std, device), dtype)
        offsets = torch.arange(0, 256 * channels, 256, dtype=torch.int32, device=device)
        return table.view(-1), offsets

    if compiling() or not (host_values(mean) and host_values(std)):
        return make()
    key = (tuple(mean.tolist()), tuple(std.tolist()), dtype, channels, str(device))
    with _LOCK:
        got = _MADE.get(key)
        if got is None:
            got = _MADE[key] = make()
    return got


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype,
              channels_last: bool) -> torch.Tensor:
    """``(images / 255 - mean) / std`` in ``dtype`` as one lookup in :func:`normalize_table`:
    ``images + channel * 256`` (int32) indexes the flattened table; ``mean``/``std`` (C,),
    host values (the table is made on the device once for them) or on the device."""
    table, offsets = _tables(mean, std, dtype, images.shape[1], images.device)
    if channels_last:  # the index, and so the output, in channels-last memory order
        images = images.contiguous(memory_format=torch.channels_last)
    return table[images + offsets.view(-1, 1, 1)]
