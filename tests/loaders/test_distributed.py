"""torchrun, 2-3 ranks over gloo: disjoint covering epochs, fresh-process resume, elastic 2→3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

pytestmark = pytest.mark.slow  # each test launches torchrun with DDP workers

SCRIPT = Path(__file__).with_name("ddp_script.py")
N = 21


def _torchrun(nproc: int, out: Path, *args: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NPU_DATA_QUIET": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--standalone", str(SCRIPT), "--out", str(out),
           "--samples", str(N), *args]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(nproc)]


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return _torchrun(2, tmp_path_factory.mktemp("full"))


def test_epochs_split_like_torch(full: list[dict]) -> None:
    for epoch in (0, 1):
        per_rank = []
        for r, rec in enumerate(full):
            idx = [i for b, e in zip(rec["indices"], rec["epochs"], strict=True) if e == epoch
                   for i in b]
            ref = DistributedSampler(range(N), 2, r, shuffle=True, seed=4)
            ref.set_epoch(epoch)
            assert idx == list(ref)
            per_rank.append(idx)
        assert len(per_rank[0]) == len(per_rank[1])  # equal batch counts
        assert set(per_rank[0]) | set(per_rank[1]) == set(range(N))
        assert len(set(per_rank[0]) & set(per_rank[1])) == 1  # torch pads 21 -> 22
    e0 = [i for b, e in zip(full[0]["indices"], full[0]["epochs"], strict=True) if e == 0
          for i in b]
    e1 = [i for b, e in zip(full[0]["indices"], full[0]["epochs"], strict=True) if e == 1
          for i in b]
    assert e0 != e1


def test_resume_in_fresh_process_equals_uninterrupted(full: list[dict], tmp_path: Path) -> None:
    head = _torchrun(2, tmp_path / "head", "--stop-after", "2")
    tail = _torchrun(2, tmp_path / "tail", "--resume", str(tmp_path / "head" / "state.json"))
    for r in range(2):
        idx = head[r]["indices"] + tail[r]["indices"]
        imgs = head[r]["images"] + tail[r]["images"]
        assert idx == full[r]["indices"]
        assert len(imgs) == len(full[r]["images"])
        for a, b in zip(imgs, full[r]["images"], strict=True):
            assert torch.equal(a, b)


def test_elastic_two_to_three_covers_the_remainder(full: list[dict], tmp_path: Path) -> None:
    head = _torchrun(2, tmp_path / "head", "--stop-after", "2")
    tail = _torchrun(3, tmp_path / "tail", "--resume", str(tmp_path / "head" / "state.json"),
                     "--epochs", "1")
    seen = {i for r in range(2) for b in head[r]["indices"] for i in b}
    assert len(seen) == 12
    got = [i for r in range(3) for b in tail[r]["indices"] for i in b]
    assert set(got) == set(range(N)) - seen  # 9 unseen over 3 ranks: none lost, none repeated
    assert len(got) == len(set(got)) == 9
    assert len({len(tail[r]["indices"]) for r in range(3)}) == 1


def _reference_samples(epochs: int = 2) -> dict[tuple[int, int], torch.Tensor]:
    """Every (epoch, index)'s augmented image from one process, batch 4, no workers."""
    sys.path.insert(0, str(SCRIPT.parent))
    from ddp_script import keyed_augment
    from loaders_fakes import ArrayDataset

    from npu_data.loaders import DataLoader, NpuDistributedSampler

    ds = ArrayDataset(N)
    sampler = NpuDistributedSampler(ds, num_replicas=1, rank=0, seed=4)
    loader = DataLoader(ds, batch_size=4, sampler=sampler, device="cpu",
                        transform=keyed_augment(), seed=9)
    out = {}
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            for j, i in enumerate(batch["index"].tolist()):
                out[(epoch, i)] = batch["image"][j].clone()
    return out


def _check_samples(records: list[dict], ref: dict[tuple[int, int], torch.Tensor]) -> set:
    seen = set()
    for rec in records:
        for key, image in rec["samples"]:
            assert torch.equal(image, ref[tuple(key)]), key
            seen.add(tuple(key))
    return seen


@pytest.mark.parametrize("world", [1, 2, 3])
def test_keyed_augmentation_is_the_same_on_every_world_size(world: int,
                                                            tmp_path: Path) -> None:
    ref = _reference_samples()
    got = _torchrun(world, tmp_path / f"w{world}", "--keyed", "--batch-size", "2")
    assert _check_samples(got, ref) == set(ref)  # every sample of both epochs, pixel for pixel


def test_keyed_augmentation_survives_an_elastic_resume(tmp_path: Path) -> None:
    ref = _reference_samples(epochs=1)
    head = _torchrun(2, tmp_path / "head", "--keyed", "--stop-after", "2", "--epochs", "1")
    tail = _torchrun(3, tmp_path / "tail", "--keyed", "--resume",
                     str(tmp_path / "head" / "state.json"), "--epochs", "1")
    assert _check_samples(head, ref) | _check_samples(tail, ref) == set(ref)
