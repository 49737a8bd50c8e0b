"""Flip before crop, whatever order the stages are written in (SDXL's conditioning rule).

diffusers' SDXL trainers (``train_text_to_image_sdxl.py`` since PR #6547) take pixels
``crop(flip(resize(image)))``: the resized image is mirrored first, the crop window is chosen
in the mirrored image (a centre offset ``round((W - tw) / 2)`` there), and ``crop_top_left``
is that window's (top, left) — so the model is told where its pixels came from.

A pipeline written ``[crop, ..., RandomHorizontalFlip]`` gets the same: a crop's parameters
are read as drawn in the mirrored image of every sample the flip mirrors. For those samples
:func:`mirror_crops` moves the crop's source window to its mirror image (a box crop's box
``left -> W - left - box_w``, a window crop's ``left -> full_w - left - out_w``) and keeps
the drawn ``crop_top_left``; the flip then mirrors the crop, and pixels, geometry and
``crop_top_left`` all describe ``crop(flip(resize(image)))``. A flip written before the crop
needs nothing: the crop already draws in the mirrored image.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from npu_data.transforms.base import Params, Transform, stage_key


def mirror_crops(stages: Sequence[Transform], params: Params,
                 inputs: Sequence[np.ndarray], first: int = 0) -> None:
    """Move, in place, the crop before each horizontal mirror of ``stages`` to the mirror
    image of the samples it flips (module doc). Only stages that commute with a mirror
    (``Transform.mirror_free``) may stand between the two.

    Args:
        stages: a pipeline's stages in order.
        params: its flat parameters, stage ``i``'s keys those of ``first + i``
            (``base.stage_key``).
        inputs: each stage's input sizes (B, 2).
        first: the index of stage 0.
    """
    for j, t in enumerate(stages):
        flip = params.get(stage_key(first + j, "flip"))
        if not t.is_hflip or flip is None:
            continue
        i = j - 1
        while i >= 0 and not stages[i].crops and stages[i].mirror_free:
            i -= 1
        if i >= 0 and stages[i].crops:
            mirror_window(params, first + i, flip.to(torch.bool).cpu(), inputs[i])


def mirror_window(params: Params, index: int, flip: torch.Tensor, sizes: np.ndarray) -> None:
    """The source window of the crop at stage ``index`` mirrored where ``flip`` (B,) is set;
    its ``crop_top_left`` (the window in the mirrored image) stays as drawn. Drawn parameters
    are host tensors: this is numpy work on the host, no device op."""
    mask = flip.numpy()
    windows = params.get(stage_key(index, "windows"))
    if windows is not None:
        w = windows.numpy().copy()
        out = params[stage_key(index, "out")].numpy()
        w[:, 1] = np.where(mask, w[:, 3] - w[:, 1] - out[:, 1], w[:, 1])
        params[stage_key(index, "windows")] = torch.from_numpy(w)
        return
    b = params[stage_key(index, "boxes")].numpy().copy()
    b[:, 1] = np.where(mask, sizes[:, 1] - b[:, 1] - b[:, 3], b[:, 1])
    params[stage_key(index, "boxes")] = torch.from_numpy(b)
