"""The DataLoader under the frameworks that wrap torch's: PyTorch Lightning and Accelerate."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl  # both frameworks are in the dev extra
import torch
from loaders_fakes import ArrayDataset, noisy_flip
from torch.utils.data import DistributedSampler

from npu_data.errors import UserError
from npu_data.loaders import DataLoader, NpuDistributedSampler

pytestmark = pytest.mark.slow  # Lightning and Accelerate, in process and under torchrun


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


@pytest.mark.parametrize("world", [1, 3, 4])
def test_lightning_shards_a_shuffled_loader_on_any_rank_count(world: int) -> None:
    """Lightning's DDP path for ``DataLoader(shuffle=True)`` on other rank counts than the
    DDP test's 2: the loader's order is a RandomSampler to it (``_is_dataloader_shuffled``),
    so it injects ``DistributedSampler(shuffle=True)`` and rebuilds our loader; every sample
    is served once per epoch (torch's padding aside), the same number of batches per rank."""
    from lightning_fabric.utilities.distributed import DistributedSamplerWrapper
    from pytorch_lightning.utilities.data import _is_dataloader_shuffled, _update_dataloader

    ds = ArrayDataset(24)
    loader = DataLoader(ds, batch_size=4, shuffle=True, device="cpu", seed=1)
    assert _is_dataloader_shuffled(loader)
    assert not isinstance(loader.sampler, DistributedSampler)  # Lightning shards it
    ours = NpuDistributedSampler(ds, num_replicas=world, rank=0)
    assert isinstance(ours, DistributedSampler) and not isinstance(ours,
                                                                   DistributedSamplerWrapper)
    for epoch in (0, 1):
        parts = []
        for rank in range(world):
            rebuilt = _update_dataloader(loader, DistributedSampler(ds, world, rank,
                                                                    shuffle=True))
            rebuilt.set_epoch(epoch)
            parts.append([i for b in rebuilt for i in b["index"].tolist()])
        assert len({len(p) for p in parts}) == 1
        assert sorted(i for p in parts for i in p) == list(range(24))


def test_lightning_step_limited_epochs_get_new_batches_with_checkpointing(tmp_path) -> None:
    """``limit_train_batches`` (a step-limited epoch) with checkpointing on, as by default:
    every epoch trains on new batches and new augmentation, and each checkpoint saves the
    loader's state."""
    loader = DataLoader(ArrayDataset(22), batch_size=5, shuffle=True, device="cpu",
                        transform=noisy_flip, seed=3)
    module = _Recorder(loader)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        pl.Trainer(accelerator="cpu", devices=1, max_epochs=3, limit_train_batches=2,
                   logger=False, enable_progress_bar=False, enable_model_summary=False,
                   default_root_dir=tmp_path).fit(module)
    assert len(module.seen) == 6
    firsts = [module.seen[i]["index"].tolist() for i in (0, 2, 4)]
    assert len({tuple(f) for f in firsts}) == 3  # a new order every epoch
    ckpt = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)
    state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state["epoch"] == 2 and state["batches"] == 2  # saved with the loader's place


def test_accelerate_prepare_keeps_the_loader_and_its_device_transform() -> None:
    """``accelerator.prepare(model, optimizer, loader)`` returns this loader (Accelerate would
    otherwise rebuild it without the device transform): batches arrive transformed, on
    ``accelerator.device``, in the loader's order. DDP and resume: test_accelerate_ddp_*."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = DataLoader(ArrayDataset(18), batch_size=4, shuffle=True, seed=2,
                        transform=noisy_flip)
    reference = [dict(b) for b in DataLoader(ArrayDataset(18), batch_size=4, shuffle=True,
                                             device="cpu", seed=2, transform=noisy_flip)]
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader and len(prepared) == 5
    for got, ref in zip(prepared, reference, strict=True):
        assert got["image"].device.type == accelerator.device.type
        assert torch.equal(got["image"], ref["image"]) and torch.equal(got["flip"], ref["flip"])
        loss = model(got["image"].float().mean(dim=(1, 2, 3)).unsqueeze(1)).sum()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def test_accelerate_gradient_accumulation_syncs_at_the_epochs_last_batch() -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ArrayDataset(18), batch_size=4, shuffle=True, transform=noisy_flip)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for batch in loader:  # 5 batches: a sync after the 3rd and at the epoch's end
        with accelerator.accumulate(model):
            accelerator.backward(model(batch["image"].float().mean(dim=(1, 2, 3))[:, None]).sum())
            syncs.append(accelerator.sync_gradients)
            optimizer.step()
            optimizer.zero_grad()
    assert syncs == [False, False, True, False, True]


def test_accelerate_prepare_refuses_a_loader_on_another_device() -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = DataLoader(ArrayDataset(8), batch_size=4, device="cpu")
    loader.device = torch.device("cuda", 1)  # as if made with device="cuda:1"
    with pytest.raises(UserError, match=r"feeds cuda:1 but accelerator.device is cpu — pass "
                                        r"device=accelerator.device"):
        accelerator.prepare(loader)


# --- the real frameworks under DDP: 2 ranks on gloo, one torchrun launch --------------------
SCRIPT = Path(__file__).with_name("frameworks_script.py")
N, BATCH = 22, 3


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("frameworks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1"}
    for framework in ("lightning", "accelerate"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--standalone", str(SCRIPT), "--out", str(out), "--framework", framework]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-4000:]
    return {kind: [torch.load(out / f"{kind}{r}.pt") for r in (0, 1)]
            for kind in ("lightning", "accelerate")}


def _epoch(steps: list[dict[str, Any]], epoch: int) -> list[int]:
    return [i for s in steps if s["epoch"] == epoch for i in s["index"]]


def _covers_each_epoch_once(runs: list[list[dict[str, Any]]], epochs: int = 2) -> None:
    for epoch in range(epochs):
        parts = [_epoch(steps, epoch) for steps in runs]
        assert len(parts[0]) == len(parts[1]) == N // 2  # the same batches on every rank
        assert sorted(parts[0] + parts[1]) == list(range(N))  # every sample, once
    orders = [_epoch(runs[0], e) for e in range(epochs)]
    assert orders[0] != orders[1]  # a new order each epoch


def test_lightning_ddp_shuffle_covers_every_sample_once_per_epoch(ddp: Any) -> None:
    """``DataLoader(shuffle=True)`` under Lightning DDP with checkpoints every 2 steps and at
    epoch ends: Lightning shards it (its DistributedSampler), checkpoints save its state."""
    assert all(rec["shuffle_type"] == "DistributedSampler" for rec in ddp["lightning"])
    _covers_each_epoch_once([rec["shuffle"] for rec in ddp["lightning"]])


def test_lightning_ddp_npu_sampler_is_kept_and_covers_every_sample(ddp: Any) -> None:
    """``sampler=NpuDistributedSampler(dataset)`` under Lightning's defaults is kept (not
    wrapped and sharded again): each rank half the samples, together all of them."""
    assert all(rec["sampler_type"] == "NpuDistributedSampler" for rec in ddp["lightning"])
    _covers_each_epoch_once([rec["sampler"] for rec in ddp["lightning"]])


def test_lightning_ddp_mid_epoch_resume_trains_the_rest_then_whole_epochs(ddp: Any) -> None:
    """A new Trainer resumed from the step-2 checkpoint (mid epoch 0) trains exactly what the
    uninterrupted run trained after step 2: the rest of epoch 0, then all of epoch 1 — with
    Lightning's DistributedSampler (fast-forward) and with NpuDistributedSampler (native)."""
    for rec in ddp["lightning"]:
        for run, resumed in (("shuffle", "resume"), ("sampler", "sampler_resume")):
            assert rec[resumed] == rec[run][2:]  # indices and (augmented) pixel sums
            assert len(_epoch(rec[resumed], 0)) == N // 2 - 2 * BATCH
            assert len(_epoch(rec[resumed], 1)) == N // 2


def test_accelerate_ddp_prepare_shards_transforms_and_resumes(ddp: Any) -> None:
    """``accelerator.prepare(model, optimizer, loader)`` on 2 processes: the loader shards
    its shuffled order over them, applies its device transform (the script checks the
    dtype, the device and the transform's keys), and ``save_state`` mid-epoch +
    ``load_state`` in a new run trains exactly the rest."""
    recs = ddp["accelerate"]
    _covers_each_epoch_once([rec["full"] for rec in recs])
    for rec in recs:
        assert all(s["len"] == 4 for s in rec["full"])  # len(): this process's batches
        assert rec["head"] + rec["tail"] == rec["full"]


def test_accelerate_ddp_refuses_a_sampler_that_would_serve_everything_twice(ddp: Any) -> None:
    for rec in ddp["accelerate"]:
        assert rec["error"].startswith("accelerator.prepare(DataLoader): its list would serve "
                                       "every sample on each of the 2 processes")
