"""Run under torchrun (2 ranks, gloo, CPU) by test_frameworks.py: the real Lightning Trainer
and the real Accelerator with npu_data's DataLoader; records what every training step got.

``--framework lightning`` or ``accelerate``: one launch each, as a user's script runs one of
them (in one process, Accelerate's state adopted Lightning's process group, and a rank once
aborted at its exit). Cases:
- ``shuffle``: ``DataLoader(shuffle=True)`` made outside Lightning, DDP, checkpoints every 2
  steps (and at epoch ends, as by default); Lightning injects its DistributedSampler.
- ``resume``: a new Trainer resumed from the step-2 (mid-epoch) checkpoint of ``shuffle``.
- ``sampler``: ``sampler=NpuDistributedSampler(dataset)`` made in ``train_dataloader()``,
  Lightning's defaults (it must be kept, not wrapped and sharded again); ``sampler_resume``:
  resumed from its step-2 checkpoint.
- ``accelerate``: ``accelerator.prepare(model, optimizer, loader)``, a mid-epoch
  ``save_state``, then a new loader and Accelerator resumed with ``load_state``; and a
  sampler that would serve every sample on each process (a one-line error).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

if not hasattr(torch.cpu, "set_device"):
    # torch 2.1: Accelerate 1.x's multi-CPU state calls torch.cpu.set_device, added in torch 2.2
    # as a no-op (the CPU has one device); on NPU/CUDA it calls torch.npu/torch.cuda's own
    torch.cpu.set_device = lambda device: None  # type: ignore[attr-defined]

sys.path.insert(0, os.path.dirname(__file__))
from loaders_fakes import ArrayDataset, noisy_flip  # noqa: E402

from npu_data.errors import UserError  # noqa: E402
from npu_data.loaders import DataLoader, NpuDistributedSampler  # noqa: E402

N, BATCH, EPOCHS = 22, 3, 2


def _steps(batch: dict[str, Any], epoch: int) -> dict[str, Any]:
    assert batch["image"].dtype == torch.uint8 and "flip" in batch  # the device transform ran
    return {"epoch": epoch, "index": batch["index"].tolist(),
            "image": batch["image"].float().sum().item()}


def lightning(out: Path, rank: int) -> None:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    class Module(pl.LightningModule):
        def __init__(self, loader: Any = None) -> None:
            super().__init__()
            self.loader = loader
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[dict[str, Any]] = []

        def train_dataloader(self) -> Any:
            if self.loader is not None:
                return self.loader
            ds = ArrayDataset(N, max_side=8)  # made here: the process group exists
            return DataLoader(ds, batch_size=BATCH, sampler=NpuDistributedSampler(ds, seed=4),
                              device="cpu", transform=noisy_flip, seed=3)

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
            self.seen.append(_steps(batch, self.current_epoch))
            x = batch["image"].float().mean(dim=(1, 2, 3)).unsqueeze(1)
            return self.layer(x).square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def trainer(root: Path) -> Any:
        every = ModelCheckpoint(dirpath=root, every_n_train_steps=2, save_top_k=-1,
                                filename="{epoch}-{step}")
        return pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=EPOCHS,
                          logger=False, enable_progress_bar=False, enable_model_summary=False,
                          default_root_dir=root, callbacks=[every])

    def shuffled() -> DataLoader:
        return DataLoader(ArrayDataset(N, max_side=8), batch_size=BATCH, shuffle=True,
                          device="cpu", transform=noisy_flip, seed=3)

    record: dict[str, Any] = {}
    module = Module(shuffled())
    trainer(out / "shuffle").fit(module)
    record["shuffle"] = module.seen
    record["shuffle_type"] = type(module.trainer.train_dataloader.sampler).__name__
    resumed = Module(shuffled())
    trainer(out / "resume").fit(resumed, ckpt_path=str(out / "shuffle" / "epoch=0-step=2.ckpt"))
    record["resume"] = resumed.seen
    sharded = Module()
    trainer(out / "sampler").fit(sharded)
    record["sampler"] = sharded.seen
    record["sampler_type"] = type(sharded.trainer.train_dataloader.sampler).__name__
    again = Module()
    trainer(out / "sampler_resume").fit(
        again, ckpt_path=str(out / "sampler" / "epoch=0-step=2.ckpt"))
    record["sampler_resume"] = again.seen
    torch.save(record, out / f"lightning{rank}.pt")


def accelerate(out: Path, rank: int) -> None:
    from accelerate import Accelerator

    def run(stop: int | None, resume: bool) -> list[dict[str, Any]]:
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(ArrayDataset(N, max_side=8), batch_size=BATCH, shuffle=True,
                            seed=3, transform=noisy_flip)
        model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
        assert prepared is loader
        if resume:
            accelerator.load_state(str(out / "acc_state"))
        seen = []
        for epoch in range(EPOCHS):
            for batch in prepared:
                assert batch["image"].device.type == accelerator.device.type == prepared.device.type
                seen.append(_steps(batch, epoch) | {"len": len(prepared)})
                loss = model(batch["image"].float().mean(dim=(1, 2, 3)).unsqueeze(1)).sum()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                if len(seen) == stop:
                    accelerator.save_state(str(out / "acc_state"))
                    return seen
        return seen

    record: dict[str, Any] = {"full": run(None, False), "head": run(2, False),
                              "tail": run(None, True)}
    accelerator = Accelerator(cpu=True)
    ds = ArrayDataset(N, max_side=8)
    try:
        accelerator.prepare(DataLoader(ds, batch_size=BATCH, sampler=list(range(N))))
        record["error"] = None
    except UserError as exc:
        record["error"] = str(exc)
    torch.save(record, out / f"accelerate{rank}.pt")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--framework", choices=("lightning", "accelerate"), required=True)
    a = p.parse_args()
    out = Path(a.out)
    rank = int(os.environ["RANK"])
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*treespec.*")
    (lightning if a.framework == "lightning" else accelerate)(out, rank)


if __name__ == "__main__":
    main()
