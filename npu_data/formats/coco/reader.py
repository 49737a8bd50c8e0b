"""A COCO instances / keypoints JSON -> Label Studio tasks (one per entry of ``images``, in
its order; the task id is the image id; an image without annotations is a task too).

Per annotation, as pycocotools reads it: ``bbox`` ``[x, y, w, h]`` pixels -> a
``rectanglelabels`` result holding ``iscrowd`` (``boxes.iscrowd``); a polygon
``segmentation`` -> one ``polygonlabels`` result per part; an RLE ``segmentation`` (counts
a list or a compressed string) -> a ``brushlabels`` result in Label Studio's brush RLE;
``keypoints`` ``[x, y, v, ...]`` -> one ``keypointlabels`` result per keypoint with ``v > 0``,
named by the category's ``keypoints`` (``v`` kept as the result's ``visibility``).
Coordinates become percent of the ``images`` entry's width and height, as Label Studio
exports them. Labels are category names in the order of the category ids; the labeling
config written beside the export fixes that order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from npu_data.annotations.brush_rle import mask_to_rle
from npu_data.common.paths import UnsafeName, inside
from npu_data.errors import UserError
from npu_data.formats.coco.rle import CocoRLEError, rle_mask
from npu_data.formats.sources import SourceOptions
from npu_data.formats.tasks import (
    Converted,
    TaskFile,
    image_task,
    label_config,
    sized,
    write_config,
)

# the controls of the labeling config: name -> (tag, result type)
BOX, POLYGON, MASK, KEYPOINT = "box", "polygon", "mask", "keypoint"
CONTROLS = {BOX: ("RectangleLabels", "rectanglelabels"),
            POLYGON: ("PolygonLabels", "polygonlabels"),
            MASK: ("BrushLabels", "brushlabels"),
            KEYPOINT: ("KeyPointLabels", "keypointlabels")}
KEYPOINT_WIDTH = 0.5  # a keypoint's size in percent of the image width (Label Studio's own)
FIX = "fix the COCO file (pycocotools' COCO() reads it the same way)"


def _bad(where: str, what: str) -> UserError:
    return UserError(f"{where}: {what} — {FIX}")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _numbers(v: Any) -> bool:
    return isinstance(v, list) and all(type(x) in (int, float) and math.isfinite(x) for x in v)


class _Coco:
    """The parts of one COCO document the tasks need, checked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            doc = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc}) — pass the COCO annotation file "
                            "as pycocotools writes it") from None
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
            raise _bad(str(path), "no 'images' list: not a COCO annotation file")
        for key in ("annotations", "categories"):
            if not isinstance(doc.get(key, []), list):
                raise _bad(str(path), f"'{key}' is not a list")
        self.images: list[dict[str, Any]] = doc["images"]
        self.categories = self._categories(doc.get("categories", []))
        self.by_image: dict[int, list[dict[str, Any]]] = {}
        self._index_images()
        self._group(doc.get("annotations", []))

    def _categories(self, cats: list[Any]) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        names: dict[str, int] = {}
        for k, c in enumerate(cats):
            where = f"{self.path}: categories[{k}]"
            if not isinstance(c, dict) or not _is_int(c.get("id")) or not isinstance(
                    c.get("name"), str) or not c["name"]:
                raise _bad(where, "needs an integer 'id' and a non-empty 'name'")
            if c["id"] in out:
                raise _bad(where, f"category id {c['id']} is listed twice")
            if c["name"] in names:
                raise _bad(where, f"categories {names[c['name']]} and {c['id']} are both named "
                           f"{c['name']!r} (labels are names; rename one)")
            kps = c.get("keypoints", [])
            if not isinstance(kps, list) or not all(isinstance(n, str) and n for n in kps):
                raise _bad(where, "'keypoints' is not a list of names")
            names[c["name"]] = c["id"]
            out[c["id"]] = c
        return dict(sorted(out.items()))

    def _index_images(self) -> None:
        for k, im in enumerate(self.images):
            where = f"{self.path}: images[{k}]"
            if not isinstance(im, dict) or not _is_int(im.get("id")):
                raise _bad(where, "needs an integer 'id'")
            where = f"{self.path}: image {im['id']}"
            if not isinstance(im.get("file_name"), str) or not im["file_name"]:
                raise _bad(where, "needs a 'file_name'")
            for side in ("width", "height"):
                if not _is_int(im.get(side)) or im[side] < 1:
                    raise _bad(where, f"'{side}' = {str(im.get(side))[:20]} is not a positive "
                               "integer (box and point coordinates are read against it)")
            if im["id"] in self.by_image:
                raise _bad(where, "the image id is listed twice")
            self.by_image[im["id"]] = []

    def _group(self, anns: list[Any]) -> None:
        seen: set[int] = set()
        for k, a in enumerate(anns):
            if not isinstance(a, dict) or not _is_int(a.get("id")):
                raise _bad(f"{self.path}: annotations[{k}]", "needs an integer 'id'")
            where = f"{self.path}: annotation {a['id']}"
            if a["id"] in seen:  # pycocotools' COCO() would keep only the last one
                raise _bad(where, "the annotation id is listed twice")
            seen.add(a["id"])
            image: Any = a.get("image_id")
            rows = self.by_image.get(image) if _is_int(image) else None
            if rows is None:
                raise _bad(where, f"image_id {str(image)[:20]} is not in 'images'")
            if not _is_int(a.get("category_id")) or a["category_id"] not in self.categories:
                raise _bad(where, f"category_id {str(a.get('category_id'))[:20]} is not in "
                           "'categories'")
            rows.append(a)


def _results(coco: _Coco, im: dict[str, Any], ann: dict[str, Any],
             used: set[str]) -> list[dict[str, Any]]:
    """The Label Studio results of one annotation on image ``im``."""
    W, H = im["width"], im["height"]
    where = f"{coco.path}: annotation {ann['id']} (image {im['id']})"
    cat = coco.categories[ann["category_id"]]
    name, aid = cat["name"], ann["id"]
    crowd = ann.get("iscrowd", 0)
    if type(crowd) is not int or crowd not in (0, 1):
        raise _bad(where, f"iscrowd = {str(crowd)[:20]} is not 0 or 1")
    out: list[dict[str, Any]] = []

    def add(control: str, rid: str, value: dict[str, Any], label: str = name) -> None:
        used.add(control)
        rtype = CONTROLS[control][1]
        value[rtype] = [label]
        out.append(sized({"id": rid, "from_name": control, "to_name": "image", "type": rtype,
                          "value": value}, W, H))

    box = ann.get("bbox")
    if box is not None:
        if not (_numbers(box) and len(box) == 4 and box[2] >= 0 and box[3] >= 0):
            raise _bad(where, f"bbox {str(box)[:60]} is not [x, y, width, height] (finite, "
                       "width and height >= 0)")
        x, y, w, h = box
        add(BOX, f"{aid}-box", {"x": x * 100.0 / W, "y": y * 100.0 / H, "width": w * 100.0 / W,
                                "height": h * 100.0 / H, "rotation": 0, "iscrowd": crowd})
    seg = ann.get("segmentation")
    if isinstance(seg, list):
        for k, poly in enumerate(seg):
            if not (_numbers(poly) and len(poly) % 2 == 0):
                raise _bad(where, f"segmentation part {k} is not a list of x, y pixel "
                           "coordinates (an even count of numbers)")
            if poly:
                pts = [[poly[i] * 100.0 / W, poly[i + 1] * 100.0 / H]
                       for i in range(0, len(poly), 2)]
                add(POLYGON, f"{aid}-polygon-{k}", {"points": pts, "closed": True})
    elif isinstance(seg, dict):
        try:
            mask = rle_mask(seg, H, W)
        except CocoRLEError as exc:
            raise _bad(where, f"segmentation RLE: {exc}") from None
        add(MASK, f"{aid}-mask", {"format": "rle", "rle": mask_to_rle(mask)})
    elif seg is not None:
        raise _bad(where, "segmentation is neither polygons (a list) nor RLE (an object)")
    kps = ann.get("keypoints")
    if kps is not None:
        names = cat.get("keypoints", [])
        if not (_numbers(kps) and len(kps) == 3 * len(names)):
            raise _bad(where, f"keypoints is not {len(names)} [x, y, v] triplets (category "
                       f"{cat['id']} names {len(names)} keypoints)")
        for j, kp_name in enumerate(names):
            x, y, v = kps[3 * j:3 * j + 3]
            if v > 0:
                add(KEYPOINT, f"{aid}-keypoint-{j}",
                    {"x": x * 100.0 / W, "y": y * 100.0 / H, "width": KEYPOINT_WIDTH,
                     "visibility": int(v)}, kp_name)
    return out


def images_root(path: Path, first: str | None) -> Path:
    """Where the file names of COCO file ``path`` are relative to: the first of its folder,
    ``images/`` in it or beside it, and the split folder beside it that COCO's own layout
    uses (``annotations/instances_val2017.json`` -> ``val2017/``) that holds ``first`` (the
    first image's file name); else the file's folder."""
    here = path.parent
    split = path.stem.rsplit("_", 1)[-1]
    candidates = [here, here / "images", here.parent / "images", here.parent / split,
                  here / split, here.parent]
    if first:
        for root in candidates:
            try:
                if inside(root, *first.split("/")).is_file():
                    return root
            except UnsafeName:
                break  # a name the import refuses anyway: it says so per task
    return here


def read(sources: list[str], stage: Path, options: SourceOptions) -> Converted:
    """Write the COCO file ``sources[0]``'s tasks to ``stage/export.json`` and its category
    and keypoint order to ``stage/label_config.xml``."""
    if len(sources) != 1:
        raise UserError(f"--format coco reads one annotation file, got {len(sources)}")
    path = Path(sources[0])
    if not path.is_file():
        raise UserError(f"{path}: no such file — pass the COCO annotation JSON "
                        "(annotations/instances_*.json)")
    path = path.resolve()
    coco = _Coco(path)
    used: set[str] = set()
    counts = {c: 0 for c in CONTROLS}
    with TaskFile(stage / "export.json") as out:
        for im in coco.images:
            results = [r for a in coco.by_image[im["id"]] for r in _results(coco, im, a, used)]
            for r in results:
                counts[r["from_name"]] += 1
            out.add(image_task(im["id"], im["file_name"], results))
        tasks = out.count
    labels = [c["name"] for c in coco.categories.values()]
    keypoints: list[str] = []
    for c in coco.categories.values():
        keypoints += [n for n in c.get("keypoints", []) if n not in keypoints]
    controls: dict[str, tuple[str, Sequence[str]]] = {
        c: (CONTROLS[c][0], keypoints if c == KEYPOINT else labels)
                for c in CONTROLS if c in used}
    config = write_config(stage, label_config(controls or {BOX: (CONTROLS[BOX][0], labels)}))
    root = images_root(path, coco.images[0]["file_name"] if coco.images else None)
    empty = sum(not rows for rows in coco.by_image.values())
    made = ", ".join(f"{n} {c}{'es' if c == BOX else 's'}" for c, n in counts.items() if n)
    return Converted("coco", stage / "export.json", root, config,
                     [f"coco: {tasks} images ({empty} without annotations), "
                      f"{len(labels)} categories; {made or 'no annotations'}",
                      f"coco: image file names are read under {root}"])

