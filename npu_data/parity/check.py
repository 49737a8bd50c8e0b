"""``npu_data.parity.check``: one transform — a user's too — against its own CPU reference;
``check_all``: that and the rows ``npu-data parity --transform`` prints.

What ``npu-data parity`` does for the built-in kernels, for any transform that defines
``reference(image, params, index)`` (or declares ``Trait.NO_PIXELS``): random padded batches
of the suite's sizes (single pixels, 1-pixel lines, extreme aspects), parameters drawn keyed
as the DataLoader draws them, the batch applied, and each sample's valid output compared with
the reference run on that sample alone. :func:`check_all` also runs the transform in a
pipeline (:func:`pipeline_for`: a crop before it, a flip after it, fused as ``Compose``
fuses them) and, given a ``ShardDataset``, that pipeline through the DataLoader
(:mod:`npu_data.parity.loader_rows`: the crop at read and after read, the geometry).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from npu_data.device import DeviceLike, manual_seed, resolve_device
from npu_data.errors import UserTypeError, UserValueError
from npu_data.parity.runner import _make_batch
from npu_data.transforms.base import Trait, Transform
from npu_data.transforms.draws import sample_keys
from npu_data.transforms.oracle.measures import ParityRow, RowAccumulator

__all__ = ["check", "check_all", "pipeline_for"]


def check(transform: Transform, *, seed: int = 0, batches: int = 2, batch_size: int = 8,
          device: DeviceLike = "cpu", tolerance: tuple[float, float] = (0.0, 0.0)
          ) -> ParityRow:
    """``transform`` on ``batches`` random padded batches on ``device``, keyed draws (from a
    generator where a stage has no ``make_params``), each sample against
    ``transform.reference``.

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
        batch = {"image": images.to(dev), "sizes": sizes.to(dev)}
        if transform.keyed:
            keys = sample_keys(seed, b, np.arange(batch_size))
            params = transform.draw_keyed(sizes.numpy(), keys)
            out = transform.apply(batch, params)
        else:  # a pipeline with a stage that draws nothing: from a generator, as it runs
            out, params = transform.run(batch, manual_seed(seed * 1000 + b, dev))
        image: torch.Tensor = out["image"]
        for i, img in enumerate(imgs):
            ref = transform.reference(img, params, i)
            h, w = ref.shape[:2]
            acc.add(ref, image[i, :, :h, :w].permute(1, 2, 0).cpu().numpy())
    return acc.row()


def pipeline_for(transform: Transform, crop: int = 64) -> Transform:
    """``transform`` in the pipeline a loader runs: ``RandomResizedCrop(crop)`` before it
    (none when it is a crop itself: ``Trait.CROP``), ``RandomHorizontalFlip()`` after it —
    the flip folded into the crop's resize when its traits allow (``compose.fusions``); a
    pipeline that starts with a crop already (``compose.split``) as it is."""
    from npu_data.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop
    from npu_data.transforms.compose import split

    crops = Trait.CROP in transform.traits
    if not crops and split(transform) is not None:
        return transform
    lead = [] if crops else [RandomResizedCrop(crop)]
    return Compose([*lead, transform, RandomHorizontalFlip()])


def check_all(transform: Transform, dataset: Any = None, *, seed: int = 0, batches: int = 2,
              batch_size: int = 8, device: DeviceLike = "cpu",
              tolerance: tuple[float, float] = (0.0, 0.0)) -> list[ParityRow]:
    """Every row ``npu-data parity --transform`` prints for ``transform``.

    Rows: ``<transform>`` (:func:`check`), ``<transform> + crop, flip`` (:func:`check` of
    :func:`pipeline_for`; none for a pipeline that starts with a crop), and with a
    ``dataset`` (a ``ShardDataset`` of images; the command writes a small one) that
    pipeline through the DataLoader on ``device``: ``loader, crop at read``, ``loader, after read`` (each sample against the reference
    replayed from ``batch["aug"]``) and ``geometry`` (the batch's other keys at read and
    after read alike, and, for a transform that moves no pixels, alike with it and without
    it: ``parity.loader_rows``).

    Args:
        transform: an npu_data transform.
        dataset: a ``ShardDataset`` for the loader rows; None: no loader rows.
        seed: the batches' and the draws' seed, and the loader's.
        batches: how many random batches :func:`check` runs.
        batch_size: samples per batch, the loader's too.
        device: where the batches run (``npu_data.device``'s names; ``"auto"``: the best).
        tolerance: (max, mean) absolute difference allowed in the pixel rows; (0, 0):
            exact, 0 levels (the geometry is exact).

    Returns:
        The rows, one ``ParityRow`` each, named after the transform.

    Raises:
        UserError: what :func:`check` raises; a pipeline (a stage without ``make_params``)
            or a dataset the DataLoader cannot crop at read.
    """
    kw: dict[str, Any] = dict(seed=seed, batches=batches, batch_size=batch_size, device=device,
                              tolerance=tolerance)
    alone = check(transform, **kw)  # refuses what is not a transform
    pipeline = pipeline_for(transform)
    rows = [alone]
    if pipeline is not transform:
        rows.append(replace(check(pipeline, **kw), kernel=f"{alone.kernel} + crop, flip"))
    if dataset is not None:
        from npu_data.parity.loader_rows import Still, loader_rows

        moves = not transform.traits & {Trait.PER_PIXEL, Trait.NO_PIXELS}
        rows += loader_rows(transform, pipeline, None if moves else pipeline_for(Still()),
                            dataset, seed=seed, batch_size=batch_size,
                            device=resolve_device(device), tolerance=tolerance)
    return rows
