"""The pipeline the loaders hold (``transforms.pipeline``): its request's parameters are the
transform's keyed draw, ``finish`` is the transform, and a dataset learns who reads it from
what it is asked for (a ``BatchRequest``), not from process or thread state."""

from __future__ import annotations

import ast
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from npu_data.batch import BatchRequest, HostBatch
from npu_data.loaders import DataLoader, LabelStudioDataset, collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.tools.sample_data import make_sample_project
from npu_data.transforms import NpuPreprocessor, draws
from npu_data.transforms.pipeline import Pipeline
from tests.support.compare import same_loader_batch
from tests.support.pipelines import crop_pipeline

LOADERS = Path(__file__).resolve().parents[2] / "npu_data" / "loaders"


def test_draw_and_finish_are_the_transform(stores: dict[str, ShardDataset]) -> None:
    ds = stores["raw"]
    transform = crop_pipeline("pipeline")
    pipeline = Pipeline.of(transform)
    assert pipeline is not None and pipeline.crop is not None
    assert Pipeline.of(lambda b, generator=None: b) is None  # not keyed: no pipeline
    ids = np.array([3, 0, 5], np.int64)
    request = pipeline.draw(ids.tolist(), ids, ds.sizes()[ids], seed=7, epoch=2)
    assert request.crop is None and request.params is not None
    drawn = transform.draw_keyed(ds.sizes()[ids], draws.sample_keys(7, 2, ids))
    assert request.params.keys() == drawn.keys()
    for k, v in drawn.items():
        assert np.array_equal(request.params[k], v.numpy()), k
    batch = collate_samples([ds[int(i)] for i in ids])
    want = transform.apply(collate_samples([ds[int(i)] for i in ids]), drawn)
    got = pipeline.finish(batch, request, cropped=False)
    assert got.keys() == want.keys()
    assert torch.equal(got["image"], want["image"]) and torch.equal(got["sizes"], want["sizes"])
    # the crop drawn with the same parameters: the plan is the request's own
    cropped = pipeline.draw(ids.tolist(), ids, ds.sizes()[ids], seed=7, epoch=2, crop=True)
    assert cropped.crop is not None and cropped.params is not None
    assert all(np.array_equal(cropped.params[k], v) for k, v in request.params.items())


def test_the_loaders_reach_transforms_only_through_the_pipeline() -> None:
    """The batch path's modules import nothing of ``transforms`` but the pipeline."""
    for name in ("assemble", "dataloader", "placement", "prefetch", "request",
                 "host_transform"):
        tree = ast.parse((LOADERS / f"{name}.py").read_text(encoding="utf-8"))
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names}
        reached = {m for m in imported if m.startswith("npu_data.transforms")}
        assert reached <= {"npu_data.transforms", "npu_data.transforms.pipeline"}, (name, reached)
        if "npu_data.transforms" in reached:  # ``from npu_data.transforms import pipeline``
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and n.module == "npu_data.transforms" for a in n.names}
            assert names == {"pipeline"}, (name, names)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> LabelStudioDataset:
    root = tmp_path_factory.mktemp("pipeline")
    project = make_sample_project(root / "project", n_images=6, width=96, height=72)
    return LabelStudioDataset(project.export_path, cache_dir=root / "cache",
                              transform=NpuPreprocessor(image_size=16, augment_level=2))


def test_a_dataset_serves_raw_samples_to_whoever_asks_with_a_request(
        labelled: LabelStudioDataset) -> None:
    request = BatchRequest((2, 0), np.array([2, 0], np.int64))
    raw = labelled.__getitems__(request)
    assert isinstance(raw, HostBatch) and raw[0]["image"].shape[2] == 3  # (H, W, 3) stored
    assert labelled[BatchRequest((2,), np.array([2], np.int64))]["index"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "applied on the host CPU"
        rows = labelled.__getitems__([2, 0])  # torch's loader: the transformed rows
        one = labelled[2]
    assert rows[0]["image"].shape == (3, 16, 16) and one["image"].shape == (3, 16, 16)


def test_two_readers_at_once_each_get_their_own_samples(labelled: LabelStudioDataset) -> None:
    """npu_data's loader and torch's read the same dataset on two threads at once: ours gets
    raw samples (it transforms them itself, once), torch's transformed ones."""
    ours = DataLoader(labelled, batch_size=3, device="cpu", seed=1)
    theirs: list[torch.Tensor] = []
    start = threading.Barrier(2)

    def torch_reads() -> None:
        start.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                theirs.extend(b["image"] for b in torch.utils.data.DataLoader(labelled,
                                                                             batch_size=2))

    thread = threading.Thread(target=torch_reads)
    thread.start()
    start.wait()
    got = [b for _ in range(3) for b in ours]
    thread.join()
    assert all(t.shape[1:] == (3, 16, 16) for t in theirs) and len(theirs) == 9
    assert len(got) == 6 and all(tuple(b["image"].shape) == (3, 3, 16, 16) for b in got)
    again = list(DataLoader(labelled, batch_size=3, device="cpu", seed=1))
    for a, b in zip(got[:len(again)], again, strict=True):
        same_loader_batch(a, b)  # the same raw samples, transformed once, the same bytes
