"""ShardDataset.__getitems__ + collate_samples equals collating the per-sample dicts exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from npu_data.annotations.images import ImageOptions
from npu_data.batch import HostBatch
from npu_data.errors import DataCorruption
from npu_data.loaders import collate_samples
from npu_data.shards.batch_read import sample_keys
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.compare import same_batch, same_value
from tests.support.exports import make_export

N = 9


def _sparse_export(root: Path) -> Path:
    """make_export's tasks, thinned so groups are empty for some samples (and some batches):
    task 1 keeps only its choice, 3 has no annotation, 4 gets a second caption and polygon,
    5 keeps box + mask, 7 keeps the text and taxonomy, 8 only the relation's two regions."""
    path = make_export(root, n=N)
    tasks = json.loads(path.read_text())

    def keep(i: int, *types: str) -> None:
        ann = tasks[i]["annotations"][1]
        ann["result"] = [r for r in ann["result"] if r["type"] in types]

    keep(1, "choices")
    tasks[3]["annotations"] = []
    keep(5, "rectanglelabels", "brushlabels")
    keep(7, "textarea", "taxonomy")
    keep(8, "rectanglelabels", "ellipselabels", "relation")
    res = tasks[4]["annotations"][1]["result"]
    res.append({"id": "t4b", "from_name": "caption", "to_name": "image", "type": "textarea",
                "value": {"text": ["second caption é"]}})
    poly = json.loads(json.dumps(next(r for r in res if r["type"] == "polygonlabels")))
    poly["id"], poly["value"]["points"] = "p4b", [[1, 1], [9, 1], [9, 9], [1, 9], [5, 5]]
    res.append(poly)
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ShardDataset]:
    tmp = tmp_path_factory.mktemp("batch_read")
    root = tmp / "proj"
    export = _sparse_export(root)
    out = {}
    for name, kw in {"raw": {"store": "raw"}, "encoded": {"store": "encoded"},
                     "all": {"store": "raw", "annotations": "all", "with_predictions": True}
                     }.items():
        opts = WriteOptions(images=ImageOptions(images_root=root), shard_size=2, **kw)  # type: ignore[arg-type]
        write_dataset(export, tmp / name, opts)
        out[name] = ShardDataset(tmp / name)
    return out


BATCHES = [
    list(range(N)),            # everything, every shard, in order
    [8, 0, 5, 3, 3, 6, 1],     # crossing shards out of order, a repeat
    [1, 3],                    # most groups empty for the whole batch
    [3],                       # a sample with no annotation at all
    [4, 7],                    # texts: 2 and 1 rows (unstackable), polygons of 3 and 5 points
    [6, -1, 2, -9],            # negative indices
]


@pytest.mark.parametrize("name", ["raw", "encoded", "all"])
@pytest.mark.parametrize("indices", BATCHES)
def test_batched_read_equals_per_sample_collate(datasets: dict[str, ShardDataset], name: str,
                                                indices: list[int]) -> None:
    ds = datasets[name]
    expected = collate_samples([ds[i] for i in indices])
    got = collate_samples(ds.__getitems__(indices))
    same_batch(expected, got)


def test_the_data_covers_what_it_claims(datasets: dict[str, ShardDataset]) -> None:
    ds = datasets["all"]
    sizes = {tuple(s) for s in ds.sizes().tolist()}
    assert len(sizes) > 3 and len(ds._names) > 3
    full = collate_samples(ds.__getitems__(list(range(N))))
    assert set(full) >= {"masks.mask", "polygons.points", "relations.from_rid",
                         "ellipses.params", "keypoints.xy", "scalars.value", "boxes.score"}
    assert full["boxes.score"].isnan().any() and not full["boxes.score"].isnan().all()
    assert isinstance(full["texts.control"], list)  # per-sample arrays: counts differ
    assert full["texts.text"][4] == ["caption 4", "second caption é"]
    assert full["polygons.vertex_valid"].sum(-1)[4].tolist() == [3, 5]
    empty = collate_samples(ds.__getitems__([3]))
    assert empty["masks.mask"].shape[1] == 0 and empty["polygons.points"].shape == (1, 0, 1, 2)


def test_sample_batch_is_the_sequence_of_sample_dicts(datasets: dict[str, ShardDataset]) -> None:
    ds = datasets["raw"]
    batch = ds.__getitems__([5, 2, 7])
    assert isinstance(batch, HostBatch) and len(batch) == 3
    for s, i in zip(batch, [5, 2, 7], strict=True):
        assert list(s) == list(ds[i]) == sample_keys(ds.kinds)
        same_value(list(ds[i].values()), list(s.values()), str(i))
    assert batch[1] is batch[1] and [s["index"] for s in batch[1:]] == [2, 7]


def test_out_of_range_index_is_an_index_error(datasets: dict[str, ShardDataset]) -> None:
    ds = datasets["raw"]
    with pytest.raises(IndexError, match=f"sample {N} out of range"):
        ds.__getitems__([0, N]).columns()


def test_corrupt_sample_names_the_sample(datasets: dict[str, ShardDataset],
                                         tmp_path: Path) -> None:
    import shutil

    shutil.copytree(datasets["encoded"].path, tmp_path / "ds")
    ds = ShardDataset(tmp_path / "ds")
    rec = ds.shard(1).index[1]
    with open(tmp_path / "ds" / ds._names[1] / "data.bin", "r+b") as fh:
        fh.seek(int(rec["offset"]))
        fh.write(b"\0" * int(rec["length"]))
    with pytest.raises(DataCorruption) as per_sample:
        ds[3]
    with pytest.raises(DataCorruption) as batched:
        collate_samples(ShardDataset(tmp_path / "ds").__getitems__([0, 3, 4]))
    def text(exc: pytest.ExceptionInfo) -> str:
        return re.sub(r"0x[0-9a-f]+", "0x", str(exc.value))  # PIL names its BytesIO object

    assert text(batched) == text(per_sample) and "dataset index 3" in text(batched)


def test_pinned_batch_is_one_buffer(datasets: dict[str, ShardDataset],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data import device as dev

    allocations: list[tuple[int, ...]] = []

    def fake_pinned(shape: tuple[int, ...], dtype: torch.dtype, device: Any) -> torch.Tensor:
        allocations.append(tuple(shape))
        return torch.empty(shape, dtype=dtype)

    monkeypatch.setattr(dev, "pin_memory_supported", lambda device: True)
    monkeypatch.setattr(dev, "empty_pinned", fake_pinned)
    ds = datasets["all"]
    indices = [8, 0, 5, 3, 4]
    expected = collate_samples([ds[i] for i in indices], pin=True)
    allocations.clear()
    got = collate_samples(ds.__getitems__(indices), pin=True)
    same_batch(expected, got)
    assert len(allocations) == 1
    ptrs = {v.untyped_storage().data_ptr() for v in got.values()
            if isinstance(v, torch.Tensor) and v.numel()}
    assert len(ptrs) == 1
