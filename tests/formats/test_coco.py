"""COCO instances / keypoints JSON -> Label Studio tasks -> shards: boxes, polygons and
keypoints within 1e-3 px of the file's, masks equal to pycocotools' decode, ``iscrowd`` kept
per box, an image without annotations still a sample; bad input one line naming the id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_api
from pycocotools.coco import COCO

from npu_data.errors import UserError
from npu_data.formats.coco.reader import KEYPOINT_WIDTH
from npu_data.formats.sources import SourceOptions, convert, detect
from npu_data.shards.importer import import_dataset
from npu_data.shards.reader import ShardDataset

SIZES = {11: (64, 48), 12: (80, 60), 13: (32, 24), 14: (50, 40)}  # image id: (w, h)
NAMES = {11: "a.jpg", 12: "sub/b.jpg", 13: "c.jpg", 14: "d.jpg"}
CATEGORIES = [  # ids out of order: labels follow the ids (dog, cat, person)
    {"id": 7, "name": "person", "supercategory": "person",
     "keypoints": ["nose", "left_eye", "right_eye"], "skeleton": [[1, 2], [1, 3]]},
    {"id": 1, "name": "dog", "supercategory": "animal"},
    {"id": 3, "name": "cat", "supercategory": "animal"},
]


def _blob(w: int, h: int, x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    m = np.zeros((h, w), np.uint8)
    m[y0:y1, x0:x1] = 1
    m[y0, x0] = 0  # not a plain rectangle: the column-major order matters
    return m


def _uncompressed(m: np.ndarray) -> dict[str, Any]:
    """The RLE of ``m`` with counts a list, as COCO's iscrowd annotations hold it."""
    flat = m.T.reshape(-1)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0]:
        runs = [0, *runs]
    return {"size": list(m.shape), "counts": runs}


def _compressed(m: np.ndarray) -> dict[str, Any]:
    rle = mask_api.encode(np.asfortranarray(m))
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}


def _doc() -> dict[str, Any]:
    crowd, single = _blob(64, 48, 5, 20, 30, 40), _blob(80, 60, 40, 10, 79, 59)
    anns = [
        {"id": 101, "image_id": 11, "category_id": 3, "iscrowd": 0, "area": 218.0,
         "bbox": [3.25, 4.5, 20.125, 10.75],
         "segmentation": [[3.25, 4.5, 23.375, 4.5, 23.375, 15.25, 3.25, 15.25],
                          [30.0, 30.0, 40.5, 30.0, 35.25, 40.125]]},
        {"id": 102, "image_id": 11, "category_id": 1, "iscrowd": 1, "area": float(crowd.sum()),
         "bbox": mask_api.toBbox(mask_api.encode(np.asfortranarray(crowd))).tolist(),
         "segmentation": _uncompressed(crowd)},
        {"id": 103, "image_id": 12, "category_id": 1, "iscrowd": 0,
         "area": float(single.sum()),
         "bbox": mask_api.toBbox(mask_api.encode(np.asfortranarray(single))).tolist(),
         "segmentation": _compressed(single)},
        {"id": 104, "image_id": 14, "category_id": 7, "iscrowd": 0, "area": 300.0,
         "bbox": [8.0, 10.0, 25.5, 20.0], "num_keypoints": 2,
         "keypoints": [10.0, 12.0, 2, 0, 0, 0, 30.5, 14.25, 1],
         "segmentation": [[8.0, 10.0, 33.5, 10.0, 20.0, 30.0]]},
    ]
    images = [{"id": i, "file_name": NAMES[i], "width": w, "height": h}
              for i, (w, h) in SIZES.items()]
    return {"info": {"description": "test"}, "images": images, "annotations": anns,
            "categories": CATEGORIES}


def _write(root: Path, doc: dict[str, Any], json_at: str = "annotations/instances_val2017.json",
           images_at: str = "val2017") -> Path:
    for i, (w, h) in SIZES.items():
        p = root / images_at / NAMES[i]
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (w, h), (i, 2 * i, 3 * i)).save(p, quality=95)
    path = root / json_at
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _import(path: Path, tmp: Path, images_root: Path | None = None) -> ShardDataset:
    conv = convert(detect([str(path)]), [str(path)], tmp / "stage", SourceOptions())
    import_dataset(conv.export, tmp / "out", images_root=images_root or conv.images_root,
                   config=str(conv.config))
    return ShardDataset(tmp / "out")


@pytest.mark.slow
def test_coco_lands_in_every_kind(tmp_path: Path) -> None:
    (tmp_path / "stage").mkdir()
    path = _write(tmp_path, _doc())
    assert detect([str(path)]) == "coco"
    coco = COCO(str(path))  # the file is one pycocotools reads
    ds = _import(path, tmp_path, tmp_path / "val2017")
    by_task = {int(ds[i]["task_id"]): ds[i] for i in range(len(ds))}
    assert sorted(by_task) == [11, 12, 13, 14]
    labels = ["dog", "cat", "person"]
    assert ds.labels["box"] == labels and ds.labels["polygon"] == labels
    assert ds.labels["keypoint"] == ["nose", "left_eye", "right_eye"]
    for image_id, s in by_task.items():
        w, h = SIZES[image_id]
        assert s["image"].shape == (h, w, 3)
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        # boxes: every annotation's, in the file's order, with its iscrowd
        np.testing.assert_allclose(s["boxes.xywhr"][:, :4],
                                   np.array([a["bbox"] for a in anns]).reshape(-1, 4),
                                   atol=1e-3, rtol=0)
        assert [labels[j] for j in s["boxes.label"]] == [
            coco.cats[a["category_id"]]["name"] for a in anns]
        assert s["boxes.iscrowd"].dtype == np.uint8
        assert s["boxes.iscrowd"].tolist() == [a["iscrowd"] for a in anns]
        # polygons: one row per part
        parts = [p for a in anns if isinstance(a["segmentation"], list)
                 for p in a["segmentation"]]
        off = s["polygons.point_offsets"]
        assert len(off) == len(parts) + 1
        for k, p in enumerate(parts):
            np.testing.assert_allclose(s["polygons.points"][off[k]:off[k + 1]],
                                       np.array(p).reshape(-1, 2), atol=1e-3, rtol=0)
        # masks: pycocotools' decode of each RLE (list and string counts)
        rles = [a for a in anns if isinstance(a["segmentation"], dict)]
        assert s["masks.mask"].shape == (len(rles), h, w)
        for k, a in enumerate(rles):
            assert np.array_equal(s["masks.mask"][k], coco.annToMask(a))
            assert s["masks.mask"][k].any()
    # keypoints: those with v > 0, named by the category's keypoints, the size LS writes
    kp = by_task[14]
    np.testing.assert_allclose(kp["keypoints.xy"], [[10.0, 12.0], [30.5, 14.25]],
                               atol=1e-3, rtol=0)
    assert [ds.labels["keypoint"][j] for j in kp["keypoints.label"]] == ["nose", "right_eye"]
    np.testing.assert_allclose(kp["keypoints.size"], KEYPOINT_WIDTH * 50 / 100, rtol=1e-6)
    # the image without annotations is a sample without rows
    empty = by_task[13]
    assert all(len(empty[f"{k}.control"]) == 0 for k in ("boxes", "polygons", "masks",
                                                         "keypoints"))


def test_images_root_found_beside_the_annotations(tmp_path: Path) -> None:
    layouts = [("annotations/instances_val2017.json", "val2017"),  # COCO's own
               ("coco/annotations.json", "coco/images"), ("ann/x.json", "images"),
               ("flat/x.json", "flat")]
    for k, (json_at, images_at) in enumerate(layouts):
        root = tmp_path / str(k)
        path = _write(root, _doc(), json_at, images_at)
        stage = root / "stage"
        stage.mkdir()
        conv = convert("coco", [str(path)], stage, SourceOptions())
        assert conv.images_root.resolve() == (root / images_at).resolve(), json_at
    # the default root imports without --images-root
    ds = _import(tmp_path / "0/annotations/instances_val2017.json", tmp_path / "0")
    assert len(ds) == 4


@pytest.mark.parametrize("change,message", [
    (lambda d: d["annotations"][0].update(image_id=99),
     r"annotation 101: image_id 99 is not in 'images'"),
    (lambda d: d["annotations"][1].update(category_id=5),
     r"annotation 102: category_id 5 is not in 'categories'"),
    (lambda d: d["annotations"][2]["segmentation"].update(size=[10, 10]),
     r"annotation 103 \(image 12\): segmentation RLE: size \[10, 10\] is not the image's"),
    (lambda d: d["annotations"][1]["segmentation"]["counts"].append(3),
     r"annotation 102 \(image 11\): segmentation RLE: the runs cover 3075 pixels"),
    (lambda d: d["annotations"][2]["segmentation"].update(counts="0~"),
     r"annotation 103 \(image 12\): segmentation RLE: character '~'"),
    (lambda d: d["annotations"][3].update(keypoints=[1, 2, 2]),
     r"annotation 104 \(image 14\): keypoints is not 3 \[x, y, v\] triplets"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, -3, 4]),
     r"annotation 101 \(image 11\): bbox \[1, 2, -3, 4\] is not"),
    (lambda d: d["annotations"][0]["segmentation"].append([1.0, 2.0, 3.0]),
     r"annotation 101 \(image 11\): segmentation part 2 is not"),
    (lambda d: d["annotations"][0].update(iscrowd=2), r"annotation 101 \(image 11\): iscrowd"),
    (lambda d: d["annotations"][0].update(iscrowd=1.0), r"iscrowd = 1.0 is not 0 or 1"),
    (lambda d: d["annotations"][0].update(image_id=[11]), r"image_id \[11\] is not in"),
    (lambda d: d["images"][1].update(width=0), r"image 12: 'width' = 0 is not a positive"),
    (lambda d: d["images"].append(dict(d["images"][0])), r"image 11: the image id is listed"),
    (lambda d: d["annotations"].append(dict(d["annotations"][2])),
     r"annotation 103: the annotation id is listed twice"),
    (lambda d: d["categories"].append({"id": 9, "name": "dog"}),
     r"categories\[3\]: categories 1 and 9 are both named 'dog'"),
])
def test_bad_input_names_the_file_and_the_id(tmp_path: Path, change: Any, message: str) -> None:
    doc = _doc()
    change(doc)
    path = _write(tmp_path, doc)
    (tmp_path / "stage").mkdir()
    with pytest.raises(UserError, match=message) as err:
        convert("coco", [str(path)], tmp_path / "stage", SourceOptions())
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "stage" / "export.json").exists()  # nothing half written
