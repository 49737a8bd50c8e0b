"""Export -> shards -> ShardDataset: pixels and every annotation checked against the percent
values of the export, converted independently here."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations.images import ImageOptions
from npu_data.errors import UserError
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import SIZES, full_results, make_export, masks_of, pixels


def _opts(root: Path, **kw: object) -> WriteOptions:
    return WriteOptions(images=ImageOptions(images_root=root), shard_size=2, **kw)  # type: ignore[arg-type]


def _corners(x: float, y: float, w: float, h: float, r: float) -> np.ndarray:
    c, s = math.cos(math.radians(r)), math.sin(math.radians(r))
    return np.array([[x, y], [x + w * c, y + w * s], [x + w * c - h * s, y + w * s + h * c],
                     [x - h * s, y + h * c]])


def _check_sample(s: dict, i: int, W: int, H: int) -> None:
    res = {r.get("from_name", "rel"): r["value"] if "value" in r else r
           for r in full_results(i, *SIZES[i % len(SIZES)])}
    b = res["bbox"]
    x, y, w, h = b["x"] * W / 100, b["y"] * H / 100, b["width"] * W / 100, b["height"] * H / 100
    np.testing.assert_allclose(s["boxes.xywhr"], [[x, y, w, h, b["rotation"]]], rtol=1e-6)
    exp = _corners(x, y, w, h, b["rotation"])
    np.testing.assert_allclose(s["boxes.corners"][0], exp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(s["boxes.xyxy"][0], [*exp.min(0), *exp.max(0)], rtol=1e-5,
                               atol=1e-4)
    p = np.array(res["poly"]["points"], float) * [W / 100, H / 100]
    np.testing.assert_allclose(s["polygons.points"], p, rtol=1e-6)
    assert s["polygons.point_offsets"].tolist() == [0, 3]
    k = res["kp"]
    np.testing.assert_allclose(s["keypoints.xy"], [[k["x"] * W / 100, k["y"] * H / 100]],
                               rtol=1e-6)
    np.testing.assert_allclose(s["keypoints.size"], [k["width"] * W / 100], rtol=1e-6)
    e = res["ell"]
    np.testing.assert_allclose(s["ellipses.params"], [[e["x"] * W / 100, e["y"] * H / 100,
                               e["radiusX"] * W / 100, e["radiusY"] * H / 100, 15]], rtol=1e-6)
    assert s["texts.text"] == [f"caption {i}"] and s["caption"] == f"caption {i}"
    assert [json.loads(t) for t in s["taxonomy.path"]] == [["animal", "cat"]]
    assert s["scalars.value"].tolist() == [4.0]
    assert s["relations.from_rid"] == [f"b{i}"] and s["relations.to_rid"] == [f"e{i}"]
    assert s["masks.mask"].shape == (1, H, W)


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_import_and_read_back_exactly(tmp_path: Path, store: str) -> None:
    root = tmp_path / "proj"
    export = make_export(root)
    summary = write_dataset(export, tmp_path / "ds", _opts(root, store=store))
    assert summary.samples == 6 and summary.rejected == 0 and summary.shards == 3
    ds = ShardDataset(tmp_path / "ds")
    assert len(ds) == 6
    assert ds.labels["bbox"] == ["cat", "dog"]
    for i in range(6):
        s = ds[i]
        W, H = SIZES[i]
        img = pixels(root, i)
        assert s["image"].shape == (H, W, 3) and s["task_id"] == 100 + i and s["index"] == i
        np.testing.assert_array_equal(s["image"], img)
        if store == "raw":
            assert not s["image"].flags.writeable
        _check_sample(s, i, W, H)
        np.testing.assert_array_equal(s["masks.mask"][0], masks_of(i, W, H))
        # default mode keeps only the latest non-cancelled annotation: no box at x=1
        assert len(s["boxes.xywhr"]) == 1
        names = [ds.labels["bbox"][j] for j in s["boxes.label"]]
        assert names == ["dog" if i % 2 == 0 else "cat"]
    np.testing.assert_array_equal(ds.sizes(), [[h, w] for w, h in SIZES])
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[3]["image"], ds[3]["image"])


def test_all_annotations_and_predictions(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    export = make_export(root, n=2)
    write_dataset(export, tmp_path / "ds", _opts(root, annotations="all", with_predictions=True))
    s = ShardDataset(tmp_path / "ds")[0]
    W, H = SIZES[0]
    xs = sorted(s["boxes.xywhr"][:, 0].tolist())
    np.testing.assert_allclose(xs, sorted([1 * W / 100, 10 * W / 100, 50 * W / 100]), rtol=1e-6)
    assert sorted(s["boxes.source"].tolist()) == [0, 0, 1]
    assert 9999 not in s["boxes.annotation"].tolist()


def test_max_side_scales_pixels_and_annotations(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    export = make_export(root, n=3)
    write_dataset(export, tmp_path / "ds", _opts(root, max_side=16))
    ds = ShardDataset(tmp_path / "ds")
    for i in range(3):
        W0, H0 = SIZES[i]
        sc = 16 / max(W0, H0)
        W, H = round(W0 * sc), round(H0 * sc)
        s = ds[i]
        expect = np.asarray(Image.fromarray(pixels(root, i)).resize((W, H), Image.BILINEAR))
        np.testing.assert_array_equal(s["image"], expect)
        _check_sample(s, i, W, H)
        big = Image.fromarray(masks_of(i, W0, H0) * 255).resize((W, H), Image.NEAREST)
        np.testing.assert_array_equal(s["masks.mask"][0], (np.asarray(big) > 127))


def test_encoded_reencode_jpeg(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    export = make_export(root, n=2)
    write_dataset(export, tmp_path / "ds", _opts(root, store="encoded", reencode="jpeg:95",
                                                 max_side=20))
    ds = ShardDataset(tmp_path / "ds")
    s = ds[0]
    assert s["image"].shape == (15, 20, 3)
    assert int(ds.shard(0).index["encoding"][0]) == 1
    ref = np.asarray(Image.fromarray(pixels(root, 0)).resize((20, 15), Image.BILINEAR), float)
    assert np.abs(s["image"].astype(float) - ref).mean() < 25


def test_deterministic_across_runs_and_workers(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    export = make_export(root)
    write_dataset(export, tmp_path / "a", _opts(root, workers=1))
    write_dataset(export, tmp_path / "b", _opts(root, workers=2))
    fa = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    fb = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert fa == fb and len(fa) > 10
    for rel in fa:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_reader_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="npu-data import"):
        ShardDataset(tmp_path / "nothing")
    (tmp_path / "half").mkdir()
    with pytest.raises(UserError, match="manifest.json"):
        ShardDataset(tmp_path / "half")
    (tmp_path / "half" / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="corrupt"):
        ShardDataset(tmp_path / "half")
