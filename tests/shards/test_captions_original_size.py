"""Captions from where datasets keep them (TextArea results, task data fields), said once and
refused where there are none; ``original_size`` is the photo's, before ``max_side``; the
``alpha`` rule of the import."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.errors import UserError
from npu_data.loaders import BucketBatchSampler, DataLoader, LabelStudioDataset
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import CaptionDropout, Compose, ResizeCrop

BUCKETS = [(64, 64), (48, 80), (80, 48)]


def _export(root: Path, where: str) -> Path:
    """8 photos; their captions in the task data (``where="data"``, no annotation), half in
    TextArea results and half in the data's ``prompt`` ("mixed"), or nowhere ("none")."""
    rng = np.random.default_rng(1)
    (root / "p").mkdir(parents=True, exist_ok=True)
    tasks = []
    for k in range(8):
        name = f"im{k}.png"
        h, w = (100, 150) if k % 3 else (150, 100)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / "p" / name)
        task: dict = {"id": k + 1, "data": {"image": name}, "annotations": []}
        text = {"id": f"t{k}", "from_name": "caption", "to_name": "image", "type": "textarea",
                "value": {"text": [f"typed {k}"]}}
        if where == "data":
            task["data"]["caption"] = f"data: photo {k}"
        elif where == "mixed" and k % 2:
            task["data"]["prompt"] = f"data: photo {k}"
        elif where == "mixed":
            task["annotations"] = [{"id": k + 1, "result": [text]}]
        tasks.append(task)
    out = root / f"export-{where}.json"
    out.write_text(json.dumps(tasks))
    return out


def test_captions_in_task_data_are_read(tmp_path: Path) -> None:
    ds = LabelStudioDataset(_export(tmp_path, "data"), images_root=tmp_path / "p",
                            cache_dir=tmp_path / "c")
    caps = [ds[i]["caption"] for i in range(len(ds))]
    assert all(c.startswith("data: ") for c in caps)
    cov = ds.caption_coverage()
    assert cov.data == {"caption": len(ds)} and cov.textarea == 0 and cov.none == 0
    sampler = BucketBatchSampler(ds, 3, BUCKETS, num_replicas=1, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every sample has a caption: nothing to say
        loader = DataLoader(ds, batch_sampler=sampler, device="cpu",
                            transform=Compose([ResizeCrop(None), CaptionDropout(0.0)]))
    seen = [c for b in loader for c in b["caption"]]
    assert sorted(seen) == sorted(caps)  # the batch path reads the same captions


def test_textarea_first_then_data_fields_and_caption_field(tmp_path: Path) -> None:
    export = _export(tmp_path, "mixed")
    ds = LabelStudioDataset(export, images_root=tmp_path / "p", cache_dir=tmp_path / "c")
    caps = [ds[i]["caption"] for i in range(len(ds))]
    from_data = [c.startswith("data: ") for c in caps]
    assert any(from_data) and not all(from_data) and all(caps)
    cov = ds.caption_coverage()
    assert cov.textarea == from_data.count(False) and cov.data == {"prompt": sum(from_data)}
    named = ShardDataset(ds.path, caption_field="prompt")
    assert [named[i]["caption"] for i in range(len(ds))] == caps  # data first, TextArea else
    with pytest.raises(UserError, match="caption_field"):
        ShardDataset(ds.path, caption_field="")


def test_a_caption_transform_over_a_dataset_without_captions_is_refused(
        tmp_path: Path) -> None:
    ds = LabelStudioDataset(_export(tmp_path, "none"), images_root=tmp_path / "p",
                            cache_dir=tmp_path / "c")
    assert all(ds[i]["caption"] == "" for i in range(len(ds)))
    sampler = BucketBatchSampler(ds, 3, BUCKETS, num_replicas=1, rank=0)
    with pytest.raises(UserError, match="pass caption_field=") as e:
        DataLoader(ds, batch_sampler=sampler, device="cpu",
                   transform=Compose([ResizeCrop(None), CaptionDropout(0.1)]))
    assert "\n" not in str(e.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without a caption transform: nothing to say
        DataLoader(ds, batch_sampler=sampler, device="cpu", transform=ResizeCrop(None))


@pytest.mark.slow
def test_inspect_shows_caption_coverage(tmp_path: Path) -> None:
    ds = LabelStudioDataset(_export(tmp_path, "mixed"), images_root=tmp_path / "p",
                            cache_dir=tmp_path / "c")
    assert len(ds) == 8  # imported
    out = subprocess.run([sys.executable, "-m", "npu_data.cli", "inspect", str(ds.path)],
                         capture_output=True, text=True, check=True).stdout
    assert "from TextArea results" in out and "from task data 'prompt'" in out


def _photos(root: Path) -> Path:
    """An export of 4 photos: EXIF-rotated JPEG, RGBA PNG, palette PNG with transparency,
    grey JPEG."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files = []
    im = Image.fromarray(rng.integers(0, 255, (300, 200, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: shown 300 wide, 200 high
    im.save(root / "rot.jpg", exif=exif)
    files.append("rot.jpg")
    rgba = rng.integers(0, 255, (120, 260, 4), dtype=np.uint8)
    rgba[:, :100, 3] = 0  # transparent left part
    Image.fromarray(rgba, "RGBA").save(root / "rgba.png")
    files.append("rgba.png")
    Image.fromarray(rng.integers(0, 255, (90, 240), dtype=np.uint8), "L").save(root / "grey.jpg")
    files.append("grey.jpg")
    tasks = [{"id": i + 1, "data": {"image": f, "caption": f"photo {f}"}, "annotations": []}
             for i, f in enumerate(files)]
    (root / "export.json").write_text(json.dumps(tasks))
    return root / "export.json"


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_original_size_is_the_photos_before_max_side(tmp_path: Path, store: str) -> None:
    export = _photos(tmp_path / "photos")
    opts = {"reencode": "jpeg:90"} if store == "encoded" else {}
    ds = LabelStudioDataset(export, images_root=tmp_path / "photos", cache_dir=tmp_path / "c",
                            store=store, max_side=64, **opts)
    shown = {0: (200, 300), 1: (120, 260), 2: (90, 240)}  # (h, w) as Label Studio shows them
    for i, hw in shown.items():
        assert tuple(ds[i]["original_size"].tolist()) == hw
        assert max(ds.sizes()[i]) == 64
    sampler = BucketBatchSampler(ds, 1, BUCKETS, num_replicas=1, rank=0)
    for read_crop in (None, False):
        for b in DataLoader(ds, batch_sampler=sampler, device="cpu", read_crop=read_crop,
                            transform=Compose([ResizeCrop(None)])):
            i = int(b["index"][0])
            assert tuple(b["original_size"][0].tolist()) == shown[i]


def test_alpha_drop_is_pillows_convert_rgb(tmp_path: Path) -> None:
    export = _photos(tmp_path / "photos")
    white = LabelStudioDataset(export, images_root=tmp_path / "photos",
                               cache_dir=tmp_path / "c")
    drop = LabelStudioDataset(export, images_root=tmp_path / "photos",
                              cache_dir=tmp_path / "c", alpha="drop")
    src = Image.open(tmp_path / "photos" / "rgba.png")
    assert np.array_equal(drop[1]["image"], np.asarray(src.convert("RGB")))
    assert (white[1]["image"][:, :100] == 255).all()  # as Label Studio shows it
    assert np.array_equal(white[0]["image"], drop[0]["image"])  # no alpha: the same
    with pytest.raises(UserError, match="alpha"):
        LabelStudioDataset(export, images_root=tmp_path / "photos", cache_dir=tmp_path / "c",
                           alpha="black")
    assert torch.is_tensor(torch.as_tensor(drop.sizes()))
