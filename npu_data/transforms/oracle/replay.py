"""Replaying a batch's parameters sample by sample on the CPU reference (tests and tools)."""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_data.transforms.base import Params, Transform, as_batch


def replay_reference(
    transform: Transform, image: np.ndarray, params: Params, index: int
) -> np.ndarray:
    """Sample ``index`` of a batch through the CPU reference with the batch's parameters.

    Args:
        transform: The transform (or ``Compose``) that ran on the batch.
        image: That sample's valid HxWx3 uint8 image (``sample_image``).
        params: What ``transform.run`` / ``get_params`` returned for the batch.
        index: The sample's position in the batch.

    Returns:
        The sample as the Pillow reference transforms it (HxWx3; float after a
        ``Normalize``).
    """
    return transform.reference(image, params, index)


def sample_image(batch: Any, index: int) -> np.ndarray:
    """A sample's valid region as an HxWx3 numpy array (copies to the host: tests and tools).

    Args:
        batch: A batch dict (``image`` (B, 3, H, W) padded, ``sizes`` (B, 2)) or an image
            tensor.
        index: The sample's position in the batch.

    Returns:
        The sample's ``sizes[index]`` region, HxWx3, in the batch's dtype.
    """
    b, _ = as_batch(batch, "sample_image", need_uint8=False)
    h, w = (int(v) for v in b["sizes"][index].tolist())
    return b["image"][index, :, :h, :w].permute(1, 2, 0).contiguous().cpu().numpy()
