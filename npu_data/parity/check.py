"""``npu_data.parity.check``: one transform — a user's too — against its own CPU reference.

What ``npu-data parity`` does for the built-in kernels, for any transform that defines
``reference(image, params, index)`` (or declares ``Trait.NO_PIXELS``): random padded batches
of the suite's sizes (single pixels, 1-pixel lines, extreme aspects), parameters drawn keyed
as the DataLoader draws them, the batch applied, and each sample's valid output compared with
the reference run on that sample alone.
"""

from __future__ import annotations

import numpy as np
import torch

from npu_data.device import DeviceLike, resolve_device
from npu_data.errors import UserTypeError, UserValueError
from npu_data.parity.runner import _make_batch
from npu_data.transforms.base import Transform
from npu_data.transforms.draws import sample_keys
from npu_data.transforms.oracle.measures import ParityRow, RowAccumulator

__all__ = ["check"]


def check(transform: Transform, *, seed: int = 0, batches: int = 2, batch_size: int = 8,
          device: DeviceLike = "cpu", tolerance: tuple[float, float] = (0.0, 0.0)
          ) -> ParityRow:
    """``transform`` on ``batches`` random padded batches on ``device``, keyed draws, each
    sample against ``transform.reference``.

    Args:
        transform: an npu_data transform (a ``Compose`` of them too).
        seed: the batches' and the draws' seed.
        batches: how many batches.
        batch_size: samples per batch.
        device: where the batch runs (``npu_data.device``'s names; ``"auto"``: the best).
        tolerance: (max, mean) absolute difference allowed; (0, 0): exact, 0 levels.

    Returns:
        One ``ParityRow`` named after the transform (``row.passed``, ``row.max`` levels).

    Raises:
        UserError: not a transform, or counts below 1.
    """
    if not isinstance(transform, Transform):
        raise UserTypeError(f"parity.check: {transform!r} is not an npu_data transform — "
                            "subclass npu_data.transforms.Transform (docs/architecture.md)")
    if batches < 1 or batch_size < 1:
        raise UserValueError(f"parity.check: batches and batch_size must be >= 1, got "
                             f"{batches} and {batch_size}")
    dev = resolve_device(device)
    rng = np.random.default_rng(seed)
    acc = RowAccumulator(repr(transform), tolerance)
    for b in range(batches):
        imgs, images, sizes = _make_batch(rng, batch_size)
        keys = sample_keys(seed, b, np.arange(batch_size))
        params = transform.draw_keyed(sizes.numpy(), keys) if transform.keyed else {}
        out = transform.apply({"image": images.to(dev), "sizes": sizes.to(dev)}, params)
        image: torch.Tensor = out["image"]
        for i, img in enumerate(imgs):
            ref = transform.reference(img, params, i)
            h, w = ref.shape[:2]
            acc.add(ref, image[i, :, :h, :w].permute(1, 2, 0).cpu().numpy())
    return acc.row()
