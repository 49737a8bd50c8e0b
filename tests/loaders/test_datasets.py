"""LabelStudioDataset: import once into a keyed shard cache, reopen instantly, resume."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from npu_data.loaders import DataLoader, LabelStudioDataset
from npu_data.sample_data import make_sample_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    return make_sample_project(tmp_path_factory.mktemp("proj"), n_images=6, width=96, height=72)


def _len(args: tuple[str, str]) -> int:
    return len(LabelStudioDataset(args[0], cache_dir=args[1]))


def test_imports_once_then_reopens(project, tmp_path: Path) -> None:
    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path, transform="t")
    assert len(ds) >= 4 and ds.transform == "t"
    s = ds[0]
    assert s["image"].dtype == np.uint8 and s["image"].shape[2] == 3
    manifest = ds.path / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    again = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    assert again.path == ds.path and len(again) == len(ds)
    assert manifest.stat().st_mtime_ns == stamp  # opened, not re-imported
    other = LabelStudioDataset(project.export_path, cache_dir=tmp_path, max_side=48)
    assert other.path != ds.path and max(other[0]["image"].shape[:2]) <= 48
    assert not list(tmp_path.glob("*.partial"))


def test_killed_import_is_resumed_not_served(project, tmp_path: Path) -> None:
    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    len(ds)
    partial = tmp_path / f"{ds.key}.partial"
    shutil.move(ds.path, partial)
    (partial / "manifest.json").unlink()  # killed before the manifest: half a cache
    fresh = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    assert len(fresh) == len(ds)
    assert (fresh.path / "manifest.json").is_file() and not partial.exists()


def test_concurrent_first_use(project, tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        lens = pool.map(_len, [(str(project.export_path), str(tmp_path))] * 2)
    assert lens[0] == lens[1] > 0
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1


def test_loader_uses_the_dataset_transform(project, tmp_path: Path) -> None:
    calls = []

    def mark(batch, generator=None):
        calls.append(batch["image"].shape[0])
        return batch

    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path, transform=mark)
    batches = list(DataLoader(ds, batch_size=4, num_workers=1, device="cpu"))
    assert sum(calls) == len(ds) == sum(int(b["image"].shape[0]) for b in batches)
    assert os.path.isdir(ds.path)


def test_batches_are_read_column_wise_like_the_shards(project, tmp_path: Path) -> None:
    from npu_data.loaders.collate import collate_samples
    from npu_data.shards.batch_read import SampleBatch

    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    got = ds.__getitems__([3, 0, 2])
    assert isinstance(got, SampleBatch)
    fast, slow = collate_samples(got), collate_samples([ds[3], ds[0], ds[2]])
    assert fast.keys() == slow.keys()
    for k in fast:
        if hasattr(fast[k], "shape"):
            torch.testing.assert_close(fast[k], slow[k], rtol=0, atol=0, equal_nan=True, msg=k)
        else:
            assert fast[k] == slow[k], k
