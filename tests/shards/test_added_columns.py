"""``boxes.iscrowd``: a fixed column added to the format on 2026-12-07. Imported from a
result's ``iscrowd`` (0 where absent, a wrong value rejects the task); a dataset or a
WebDataset sample written before it existed reads it as 0, everywhere it is read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
from PIL import Image

from npu_data.formats.webdataset.mapping import sample_columns, sample_json
from npu_data.loaders import collate_samples
from npu_data.shards.format import MANIFEST, column_file
from npu_data.shards.importer import import_dataset
from npu_data.shards.reader import ShardDataset
from npu_data.shards.verify import verify_dataset


def _box(rid: str, **extra: object) -> dict:
    return {"id": rid, "from_name": "box", "to_name": "image", "type": "rectanglelabels",
            "original_width": 40, "original_height": 30,
            "value": {"x": 10, "y": 20, "width": 30, "height": 40, "rotation": 0,
                      "rectanglelabels": ["car"], **extra}}


def _dataset(tmp: Path) -> ShardDataset:
    Image.new("RGB", (40, 30), (1, 2, 3)).save(tmp / "a.png")
    tasks = [{"id": i, "data": {"image": "a.png"}, "annotations": [{"id": i, "result": r}]}
             for i, r in enumerate([[_box("a", iscrowd=1), _box("b")], [_box("c", iscrowd=0)],
                                    [_box("d", iscrowd=True)], [_box("e", iscrowd=2)],
                                    [_box("f", iscrowd="1")]])]
    (tmp / "export.json").write_text(json.dumps(tasks))
    summary = import_dataset(tmp / "export.json", tmp / "out", images_root=tmp, shard_size=2)
    assert summary.rejected == 2
    reasons = (tmp / "out" / "rejected.jsonl").read_text()
    assert "field 'iscrowd' = 2 is not 0 or 1" in reasons
    assert "field 'iscrowd' = '1' is not 0 or 1" in reasons
    return ShardDataset(tmp / "out")


def test_iscrowd_imported_per_box(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    assert [ds[i]["boxes.iscrowd"].tolist() for i in range(len(ds))] == [[1, 0], [0], [1]]
    assert ds[0]["boxes.iscrowd"].dtype == np.uint8
    batch = collate_samples(ds.__getitems__([0, 1, 2]))
    assert batch["boxes.iscrowd"].tolist() == [[1, 0], [0, 0], [1, 0]]
    assert batch["boxes.valid"].tolist() == [[True, True], [True, False], [True, False]]
    # the WebDataset JSON carries it both ways
    s = ds[0]
    back = sample_columns(orjson.loads(sample_json(s, ds.controls, ds.labels, ["boxes"])))
    assert back["boxes.iscrowd"].tolist() == [1, 0]


def test_datasets_written_before_read_iscrowd_as_zero(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    s = ds[0]
    part = json.loads(sample_json(s, ds.controls, ds.labels, ["boxes"]))
    del part["boxes"]["iscrowd"]  # a tar written before the column
    assert sample_columns(part)["boxes.iscrowd"].tolist() == [0, 0]
    # a dataset folder written before: no ann.boxes.iscrowd.npy, not in the manifest
    out = tmp_path / "out"
    manifest = json.loads((out / MANIFEST).read_text())
    fname = column_file("boxes.iscrowd")
    for sh in manifest["shards"]:
        del sh["files"][fname]
        (out / sh["name"] / fname).unlink()
    manifest.get("columns", {}).pop("boxes.iscrowd", None)
    (out / MANIFEST).write_text(json.dumps(manifest))
    old = ShardDataset(out)
    assert [old[i]["boxes.iscrowd"].tolist() for i in range(len(old))] == [[0, 0], [0], [0]]
    assert old[0]["boxes.iscrowd"].dtype == np.uint8
    np.testing.assert_array_equal(old[0]["boxes.xywhr"], s["boxes.xywhr"])
    batch = collate_samples(old.__getitems__([0, 1, 2]))
    assert batch["boxes.iscrowd"].tolist() == [[0, 0], [0, 0], [0, 0]]
    assert verify_dataset(out) == []
