"""Loader batches after the device transform equal the CPU reference with replayed params."""

from __future__ import annotations

import numpy as np
import torch
from loaders_fakes import ArrayDataset

from npu_data.loaders import DataLoader, collate_samples
from npu_data.loaders.dataloader import batch_seed
from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop


def test_loader_output_is_the_reference_with_replayed_params() -> None:
    ds = ArrayDataset(12, max_side=40)
    augment = Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                       RandomHorizontalFlip()])
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=1, device="cpu",
                        transform=augment, seed=6)
    for number, out in enumerate(loader):
        idx = out["index"].tolist()
        host = collate_samples([ds[i] for i in idx])
        gen = torch.Generator().manual_seed(batch_seed(6, 0, 0, number))
        again, params = augment.run(host, gen)
        assert torch.equal(again["image"], out["image"])  # same draw as inside the loader
        for j, i in enumerate(idx):
            ref = augment.apply_reference(np.asarray(ds[i]["image"]), params, j)
            got = out["image"][j].permute(1, 2, 0).numpy()
            diff = np.abs(ref.astype(np.int16) - got.astype(np.int16))
            assert diff.max() <= 1, (number, j, int(diff.max()))  # exact here; 1 LSB allowed
