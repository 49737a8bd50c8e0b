"""A small real DDP training loop over augmented device batches.

    torchrun --nproc_per_node=2 examples/train.py --data DIR --epochs 1
    torchrun --nproc_per_node=2 examples/train.py            # makes a small dataset first

DIR is a shard folder written by ``npu-data import``. The model (a few conv layers) learns
the first box label of each image (or "no box"). The distributed backend comes from
``npu_data.device.dist_backend`` (gloo on the CPU, nccl on CUDA, hccl on an NPU).
``--resume FILE`` / ``--save FILE`` keep model, optimiser and loader state (exact mid-epoch
resume through the sampler).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from npu_data import device as dev
from npu_data.loaders import DataLoader, NpuDistributedSampler
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import (
    ColorJitter,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
)


def make_dataset(root: Path, n: int) -> Path:
    """A small boxes + captions project imported into raw shards (rank 0 only)."""
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset
    from npu_data.tools.sample_data import make_bench_images

    out = root / "shards"
    if not (out / "manifest.json").is_file():
        proj = make_bench_images(root / "project", n=n, width=160, height=120)
        write_dataset(proj.export_path, out,
                      WriteOptions(store="raw", images=image_options(proj.export_path)))
    return out


class Net(nn.Module):
    """Three conv blocks and a linear head."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="shard folder (default: make a small one)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--device", default="auto")
    p.add_argument("--save", help="write a checkpoint here at the end")
    p.add_argument("--resume", help="continue from this checkpoint")
    a = p.parse_args()

    device = dev.resolve_device(a.device)
    dev.set_device(device)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(dev.dist_backend(device))
    rank = dist.get_rank() if distributed else 0
    data = Path(a.data) if a.data else Path(os.environ.get("TMPDIR", "/tmp")) / "npu-data-train"
    if not a.data:
        if rank == 0:
            make_dataset(data, 256)
        if distributed:
            dist.barrier()
        data = data / "shards"
    ds = ShardDataset(data)
    classes = max((len(v) for v in ds.labels.values()), default=0) + 1

    augment = Compose([RandomResizedCrop(a.size), ColorJitter(0.4, 0.4, 0.4, 0.1),
                       RandomHorizontalFlip(), Normalize(channels_last=True)])
    sampler = NpuDistributedSampler(ds)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                        pin_memory=True, persistent_workers=a.workers > 0, drop_last=True,
                        device=device, transform=augment, seed=0)
    model = Net(classes).to(device).to(memory_format=torch.channels_last)
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if dev.is_accelerator(device) else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if a.resume:
        ck = torch.load(a.resume, map_location=device, weights_only=True)
        (model.module if distributed else model).load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        start = loader.epoch

    for epoch in range(start, a.epochs):
        sampler.set_epoch(epoch)
        t0, seen, total = time.perf_counter(), 0, torch.zeros((), device=device)
        for step, batch in enumerate(loader):
            labels = batch["boxes.label"][:, 0].clamp(min=-1) + 1  # 0 = no box
            loss = F.cross_entropy(model(batch["image"]), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
            seen += int(labels.shape[0])
            if rank == 0 and step % 10 == 0:
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.3f}")
        if rank == 0:
            dt = time.perf_counter() - t0
            world = dist.get_world_size() if distributed else 1
            print(f"epoch {epoch}: mean loss {(total / max(1, len(loader))).item():.3f}, "
                  f"{seen * world / dt:.0f} img/s over {world} rank(s) on {dev.describe(device)}")
    if a.save and rank == 0:
        net = model.module if distributed else model
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(),
                    "loader": loader.state_dict()}, a.save)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
