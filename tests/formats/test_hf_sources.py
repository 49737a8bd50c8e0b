"""Hugging Face ``datasets`` parquet files and ``save_to_disk`` folders, written by the
``datasets`` library itself, imported into shards: every row present, pixels equal to Pillow's
decode, labels equal to ``datasets``' own ClassLabel ids and names, captions byte-equal; the
refusals (a DatasetDict, several splits, a missing image, a path outside the folder, pyarrow
missing) are one line each."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import datasets as hd
import numpy as np
import orjson
import pytest
from PIL import Image

from npu_data.errors import UserError
from npu_data.formats.sources import SourceOptions, convert, detect
from npu_data.shards.importer import import_dataset
from npu_data.shards.reader import ShardDataset

NAMES = ["zebra", "ant", "cat"]  # ClassLabel order, not sorted on purpose
CAPTIONS = ["a photo of a cat", "  leading and trailing  ", "ünïcödé — 猫 🐱", "line one\nline two",
            "", "tab\tand \"quotes\""]


def _png(rng: np.random.Generator, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _jpeg(rng: np.random.Generator, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _dataset(n: int = 12, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    images = [{"bytes": (_png if i % 3 else _jpeg)(rng, 9 + i, 14 + 2 * i),
               "path": f"img_{i}.{'png' if i % 3 else 'jpg'}"} for i in range(n)]
    features = hd.Features({"image": hd.Image(), "text": hd.Value("string"),
                            "label": hd.ClassLabel(names=NAMES), "score": hd.Value("float32"),
                            "tags": hd.List(hd.Value("string"))})
    return hd.Dataset.from_dict(
        {"image": images, "text": [CAPTIONS[i % len(CAPTIONS)] for i in range(n)],
         "label": [(i * 7) % 3 for i in range(n)], "score": [i / 4 for i in range(n)],
         "tags": [[f"t{i}", "x"] for i in range(n)]}, features=features)


def _import(fmt: str, sources: list[str], tmp: Path) -> tuple[ShardDataset, Any]:
    stage = tmp / "stage"
    stage.mkdir()
    conv = convert(fmt, sources, stage, SourceOptions())
    import_dataset(conv.export, tmp / "ds", images_root=conv.images_root,
                   config=str(conv.config) if conv.config else None)
    return ShardDataset(tmp / "ds"), conv


def _assert_same(ds: ShardDataset, source: Any) -> None:
    """Every row of ``source`` (as datasets reads it) is the sample with its task id."""
    assert len(ds) == len(source)
    assert ds.labels == {"label": NAMES}
    by_task = {int(ds[i]["task_id"]): i for i in range(len(ds))}
    assert sorted(by_task) == list(range(len(source)))
    raw = source.cast_column("image", hd.Image(decode=False))
    for t, row in enumerate(source):
        s = ds[by_task[t]]
        want = np.asarray(Image.open(io.BytesIO(raw[t]["image"]["bytes"])).convert("RGB"))
        np.testing.assert_array_equal(s["image"], want)
        np.testing.assert_array_equal(s["image"], np.asarray(row["image"].convert("RGB")))
        assert s["choices.label"].tolist() == [row["label"]]
        assert ds.labels["label"][row["label"]] == NAMES[row["label"]]
        assert s["caption"].encode() == row["text"].encode()
        shard, j = ds.locate(by_task[t])
        data = orjson.loads(ds.shard(shard).data_json(j))
        assert data["score"] == row["score"] and data["tags"] == row["tags"]
        assert data["label"] == NAMES[row["label"]]


def test_to_parquet_imports_every_row(tmp_path: Path) -> None:
    src = _dataset()
    path = tmp_path / "train.parquet"
    src.to_parquet(str(path))
    assert detect([str(path)]) == "hf-parquet"
    ds, conv = _import("hf-parquet", [str(path)], tmp_path)
    assert conv.config is not None and "image column 'image'" in conv.notes[0]
    _assert_same(ds, hd.Dataset.from_parquet(str(path)))


def test_parquet_read_by_row_groups(tmp_path: Path) -> None:
    """Several files, each of several row groups (the reader streams them)."""
    import pyarrow.parquet as pq

    src = _dataset(n=150)
    folder = tmp_path / "repo" / "data"
    folder.mkdir(parents=True)
    src.select(range(100)).to_parquet(str(folder / "train-00000-of-00002.parquet"),
                                      batch_size=16)
    src.select(range(100, 150)).to_parquet(str(folder / "train-00001-of-00002.parquet"),
                                           batch_size=16)
    assert pq.ParquetFile(folder / "train-00000-of-00002.parquet").num_row_groups > 2
    assert detect([str(tmp_path / "repo")]) == "hf-parquet"
    ds, _ = _import("hf-parquet", [str(tmp_path / "repo")], tmp_path)
    _assert_same(ds, src)


def test_rows_are_read_a_few_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded: no batch handed on holds more than BATCH_ROWS rows."""
    from npu_data.formats.hf import columns, parquet

    sizes: list[int] = []
    add = columns.Rows.add

    def counted(self: Any, batch: Any, *a: Any) -> None:
        sizes.append(batch.num_rows)
        add(self, batch, *a)

    monkeypatch.setattr(columns.Rows, "add", counted)
    _dataset(n=150).to_parquet(str(tmp_path / "big.parquet"))  # one row group of 150
    convert("hf-parquet", [str(tmp_path / "big.parquet")], tmp_path, SourceOptions())
    assert sum(sizes) == 150 and max(sizes) <= parquet.BATCH_ROWS < 150


def test_save_to_disk_imports_every_row(tmp_path: Path) -> None:
    src = _dataset(n=20)
    src.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    assert len(list((tmp_path / "saved").glob("data-*.arrow"))) == 3
    assert detect([str(tmp_path / "saved")]) == "hf-disk"
    ds, _ = _import("hf-disk", [str(tmp_path / "saved")], tmp_path)
    _assert_same(ds, hd.load_from_disk(str(tmp_path / "saved")))
    one = sorted((tmp_path / "saved").glob("data-*.arrow"))[1]  # one file alone
    assert detect([str(one)]) == "hf-disk"
    (tmp_path / "one").mkdir()
    ds, _ = _import("hf-disk", [str(one)], tmp_path / "one")
    _assert_same(ds, hd.Dataset.from_file(str(one)))


def test_dataset_dict_names_each_split(tmp_path: Path) -> None:
    src = _dataset(n=6)
    hd.DatasetDict({"train": src, "test": src.select([0, 1])}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UserError, match=r"DatasetDict of 2 splits \(train, test\).*import one "
                                        r"split: pass its folder") as err:
        convert("hf-disk", [str(tmp_path / "dd")], tmp_path, SourceOptions())
    assert str(tmp_path / "dd" / "train") in str(err.value) and "\n" not in str(err.value)
    ds, _ = _import("hf-disk", [str(tmp_path / "dd" / "train")], tmp_path)
    _assert_same(ds, src)


def test_hub_folder_of_several_splits_is_refused(tmp_path: Path) -> None:
    src = _dataset(n=6)
    data = tmp_path / "repo" / "data"
    src.select(range(4)).to_parquet(str(data / "train-00000-of-00001.parquet"))
    src.select(range(4, 6)).to_parquet(str(data / "test-00000-of-00001.parquet"))
    with pytest.raises(UserError, match="holds 2 splits") as err:
        convert("hf-parquet", [str(tmp_path / "repo")], tmp_path, SourceOptions())
    assert f"{data}/train-*.parquet (1 file(s))" in str(err.value)
    assert not (tmp_path / "export.json").exists()


def test_image_paths_read_inside_the_folder_only(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    root = tmp_path / "src"
    (root / "pics").mkdir(parents=True)
    for i in range(3):
        (root / "pics" / f"{i}.png").write_bytes(_png(rng, 5 + i, 7))
    monkeypatch.chdir(root)  # datasets keeps the relative paths it is given
    paths = hd.Dataset.from_dict({"image": [f"pics/{i}.png" for i in range(3)],
                                  "caption": ["a", "b", "c"]}).cast_column("image", hd.Image())
    paths.to_parquet("paths.parquet")
    ds, _ = _import("hf-parquet", [str(root / "paths.parquet")], tmp_path)
    for i in range(3):
        want = np.asarray(Image.open(root / "pics" / f"{int(ds[i]['task_id'])}.png").convert("RGB"))
        np.testing.assert_array_equal(ds[i]["image"], want)
    (tmp_path / "secret.png").write_bytes(_png(rng, 4, 4))
    hd.Dataset.from_dict({"image": ["../secret.png"]}).cast_column(
        "image", hd.Image()).to_parquet("escape.parquet")
    with pytest.raises(UserError, match=r"escape.parquet row 0: .*refused"):
        convert("hf-parquet", [str(root / "escape.parquet")], tmp_path / "s2", SourceOptions())


def test_a_row_without_image_is_named(tmp_path: Path) -> None:
    src = _dataset(n=4).to_dict()
    src["image"][2] = None
    bad = hd.Dataset.from_dict(src, features=_dataset(n=1).features)
    bad.to_parquet(str(tmp_path / "holes.parquet"))
    with pytest.raises(UserError, match=r"holes.parquet row 2: no image .*ds.filter"):
        convert("hf-parquet", [str(tmp_path / "holes.parquet")], tmp_path, SourceOptions())


def test_a_damaged_file_is_named(tmp_path: Path) -> None:
    _dataset(n=3).to_parquet(str(tmp_path / "cut.parquet"))
    whole = (tmp_path / "cut.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserError, match=r"cut.parquet: not a readable parquet file .* write it "
                                        "again with datasets"):
        convert("hf-parquet", [str(tmp_path / "cut.parquet")], tmp_path, SourceOptions())


def test_no_pyarrow_says_which_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    with pytest.raises(UserError, match=r"pip install 'npu-data\[hf\]'") as err:
        convert("hf-parquet", [str(tmp_path / "x.parquet")], tmp_path, SourceOptions())
    assert "\n" not in str(err.value)
