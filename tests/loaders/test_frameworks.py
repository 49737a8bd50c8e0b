"""The DataLoader under the frameworks that wrap torch's: PyTorch Lightning and Accelerate."""

from __future__ import annotations

import warnings
from typing import Any

import pytorch_lightning as pl  # both frameworks are in the dev extra
import torch
from loaders_fakes import ArrayDataset, noisy_flip
from torch.utils.data import DistributedSampler

from npu_data.loaders import DataLoader


def _indices(loader: Any) -> list[int]:
    return torch.cat([b["index"] for b in loader]).tolist()


def test_is_a_torch_dataloader() -> None:
    loader = DataLoader(ArrayDataset(8), batch_size=4, device="cpu")
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert loader.batch_size == 4 and loader.dataset is not None and loader.sampler is not None


class _Recorder(pl.LightningModule):
    """Records what each training step receives; one tiny linear layer to optimise."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__()
        self.loader = loader
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[dict[str, Any]] = []

    def train_dataloader(self) -> DataLoader:
        return self.loader

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.seen.append({"index": batch["index"].clone(), "flip": batch["flip"].clone(),
                          "image": batch["image"].clone()})
        x = batch["image"].float().mean(dim=(1, 2, 3)).unsqueeze(1)
        return self.layer(x).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(**kw: Any) -> Any:
    return pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kw)


def test_lightning_trains_one_epoch_with_the_device_transform() -> None:
    loader = DataLoader(ArrayDataset(22), batch_size=5, shuffle=True, device="cpu",
                        transform=noisy_flip, seed=3)
    reference = [dict(b) for b in DataLoader(ArrayDataset(22), batch_size=5, shuffle=True,
                                             device="cpu", transform=noisy_flip, seed=3)]
    module = _Recorder(loader)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        _trainer().fit(module)
    assert len(module.seen) == 5
    assert sorted(torch.cat([b["index"] for b in module.seen]).tolist()) == list(range(22))
    for got, ref in zip(module.seen, reference, strict=True):  # same order, same augmentation
        assert torch.equal(got["index"], ref["index"]) and torch.equal(got["flip"], ref["flip"])
        assert torch.equal(got["image"], ref["image"])


def test_lightning_sampler_injection_keeps_our_loader_and_its_extras() -> None:
    """What Lightning does under DDP: rebuild the loader from its attributes with a
    DistributedSampler. The rebuilt loader is ours, with device, transform and seed kept."""
    from pytorch_lightning.utilities.data import _update_dataloader

    ds = ArrayDataset(20)
    loader = DataLoader(ds, batch_size=4, device="cpu", transform=noisy_flip, seed=11,
                        device_prefetch=1)
    parts = []
    for rank in (0, 1):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=False)
        rebuilt = _update_dataloader(loader, sampler)
        assert type(rebuilt) is DataLoader and rebuilt.sampler is sampler
        assert (rebuilt.transform, rebuilt.seed, rebuilt.device_prefetch, rebuilt.device) == (
            noisy_flip, 11, 1, torch.device("cpu"))
        batches = list(rebuilt)
        assert all("flip" in b for b in batches)  # the transform ran
        parts.append(torch.cat([b["index"] for b in batches]).tolist())
    assert parts[0] == list(range(0, 20, 2)) and parts[1] == list(range(1, 20, 2))


def test_accelerate_prepare_keeps_batches_and_order() -> None:
    """Accelerate rebuilds any torch DataLoader as its own ``DataLoaderShard`` (documented in
    docs/migration.md): our collate and order survive; the device transform is applied by
    the training step (``loader.transform``), or the loader is kept out of ``prepare``."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = DataLoader(ArrayDataset(18), batch_size=4, shuffle=True, device="cpu", seed=2,
                        transform=noisy_flip)
    prepared = accelerator.prepare(loader)
    plain = DataLoader(ArrayDataset(18), batch_size=4, shuffle=True, device="cpu", seed=2)
    ours, theirs = list(plain), list(prepared)
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs, strict=True):
        assert a.keys() == b.keys()
        for k, v in a.items():
            assert torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k], k
    # Kept out of prepare(): the loader runs as is, transform included.
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    assert isinstance(model, torch.nn.Module)
    assert all("flip" in b for b in loader)
