"""Loader batches after the device transform equal the CPU reference replayed from the
parameters the batch carries, and those parameters from (seed, epoch, index) alone."""

from __future__ import annotations

import numpy as np
import torch
from loaders_fakes import ArrayDataset

from npu_data.loaders import DataLoader
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    sample_params,
)


def test_loader_output_is_the_reference_with_replayed_params() -> None:
    ds = ArrayDataset(12, max_side=40)
    augment = Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                       RandomHorizontalFlip()])
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=1, device="cpu",
                        transform=augment, seed=6)
    seen = 0
    for out in loader:
        aug = out["aug"]
        assert all(v.device.type == "cpu" and v.dtype != torch.float64 for v in aug.values())
        for j, i in enumerate(out["index"].tolist()):
            image = np.asarray(ds[i]["image"])
            ref = augment.reference(image, aug, j)
            got = out["image"][j].permute(1, 2, 0).numpy()
            assert np.array_equal(ref, got), (i, int(np.abs(ref.astype(int) - got).max()))
            alone = sample_params(augment, 6, 0, [i], [image.shape[:2]])
            assert alone.keys() == aug.keys()
            for k, v in alone.items():
                assert torch.equal(v[0], aug[k][j]), (i, k)
            seen += 1
    assert seen == 12
