"""Run under torchrun by test_distributed.py: records what every rank's DataLoader serves."""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from loaders_fakes import ArrayDataset, noisy_flip  # noqa: E402

from npu_data import device as dev  # noqa: E402
from npu_data.loaders import DataLoader, NpuDistributedSampler  # noqa: E402
from npu_data.transforms import (  # noqa: E402
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
)


def keyed_augment() -> Compose:
    """A pipeline with keyed host draws (the per-sample invariance tests)."""
    return Compose([RandomResizedCrop(8), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--samples", type=int, default=21)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-after", type=int, default=-1, help="save state after K batches")
    p.add_argument("--resume", default=None)
    p.add_argument("--keyed", action="store_true", help="the keyed Compose, not noisy_flip")
    p.add_argument("--batch-size", type=int, default=3)
    a = p.parse_args()
    dist.init_process_group(dev.dist_backend("cpu"))
    rank = dist.get_rank()
    ds = ArrayDataset(a.samples)
    sampler = NpuDistributedSampler(ds, seed=4)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=1,
                        device="cpu", transform=keyed_augment() if a.keyed else noisy_flip,
                        seed=9)
    start = 0
    if a.resume:
        with open(a.resume) as fh:
            state = json.load(fh)
        loader.load_state_dict(state)
        start = state["epoch"]
    record: dict[str, list] = {"indices": [], "epochs": [], "images": [], "samples": []}
    seen = 0
    for epoch in range(start, a.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            t = torch.ones(1)
            dist.all_reduce(t)  # a collective per step, like a training loop
            record["indices"].append(batch["index"].tolist())
            record["epochs"].append(epoch)
            record["images"].append(batch["image"].clone())
            record["samples"] += [((epoch, i), batch["image"][j].clone())
                                  for j, i in enumerate(batch["index"].tolist())]
            seen += 1
            if seen == a.stop_after:
                if rank == 0:
                    with open(os.path.join(a.out, "state.json"), "w") as fh:
                        json.dump(loader.state_dict(), fh)
                break
        if seen == a.stop_after:
            break
    torch.save(record, os.path.join(a.out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
