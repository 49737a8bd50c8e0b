"""Every kind with geometry draws its own rows in previews (``Kind.paint``), also from an
augmented batch (``Kind.unbatch``)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations.images import ImageOptions
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import KINDS, PADDED
from npu_data.loaders import collate_samples
from npu_data.previews.batch_grid import batch_samples
from npu_data.previews.canvas import Canvas, draw_sample
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import make_export


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    tmp = tmp_path_factory.mktemp("draw")
    path = make_export(tmp / "proj", n=6)
    write_dataset(path, tmp / "out", WriteOptions(images=ImageOptions(images_root=tmp / "proj")))
    return ShardDataset(tmp / "out")


def _drawn(kind: Kind, sample: dict, ds: ShardDataset) -> np.ndarray:
    img = Image.fromarray(np.ascontiguousarray(sample["image"])).convert("RGBA")
    canvas = Canvas(img, 1, ds.labels, ds.controls)
    kind.paint(canvas, sample)
    return np.asarray(canvas.image.convert("RGB")).astype(np.int16)


def test_the_kinds_with_geometry_are_the_ones_that_draw() -> None:
    assert {k.name for k in KINDS if type(k).paint is not Kind.paint} == {k.name for k in PADDED}


@pytest.mark.parametrize("kind", PADDED, ids=lambda k: k.name)
def test_each_kind_draws_its_rows(kind: Kind, dataset: ShardDataset) -> None:
    rows = [i for i in range(len(dataset)) if len(dataset[i][f"{kind.name}.control"])]
    assert rows, f"the test export has no {kind.name}"
    sample = dataset[rows[0]]
    plain = np.asarray(sample["image"]).astype(np.int16)
    assert (np.abs(_drawn(kind, sample, dataset) - plain).sum(axis=2) > 0).sum() > 10
    empty = {k: v[:0] if k.startswith(f"{kind.name}.") and hasattr(v, "__len__") else v
             for k, v in sample.items() if not k.endswith("offsets")}
    assert np.array_equal(_drawn(kind, empty, dataset), plain)  # no rows: nothing drawn


def test_a_batch_preview_draws_what_the_sample_preview_draws(dataset: ShardDataset) -> None:
    samples = [dataset[i] for i in range(len(dataset))]
    batch = collate_samples(samples)
    for s, b in zip(samples, batch_samples(batch), strict=True):
        for kind in PADDED:
            assert np.array_equal(_drawn(kind, b, dataset), _drawn(kind, s, dataset)), kind.name
        assert draw_sample(b, dataset.labels, dataset.controls).size == draw_sample(
            s, dataset.labels, dataset.controls).size
