"""A small generated Label Studio export (PNG images, every result type) for shard tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from npu_data.tools.sample_data import mask_to_rle

SIZES = [(40, 30), (32, 48), (50, 20), (24, 24), (36, 28), (30, 40)]  # (width, height)


def _reg(rid: str, frm: str, typ: str, w: int, h: int, value: dict[str, Any]) -> dict[str, Any]:
    return {"id": rid, "from_name": frm, "to_name": "image", "type": typ, "value": value,
            "original_width": w, "original_height": h, "image_rotation": 0}


def full_results(i: int, w: int, h: int) -> list[dict[str, Any]]:
    """Every result type; values depend on the task number ``i``."""
    mask = np.zeros((h, w), bool)
    mask[2:2 + i + 3, 1:w // 2] = True
    return [
        _reg(f"b{i}", "bbox", "rectanglelabels", w, h, {"x": 10 + i, "y": 20, "width": 30,
             "height": 25.5, "rotation": 30.0 * i, "rectanglelabels": ["cat" if i % 2 else "dog"]}),
        _reg(f"p{i}", "poly", "polygonlabels", w, h, {"points": [[5, 5], [50, 10 + i], [30, 60]],
             "closed": True, "polygonlabels": ["cat"]}),
        _reg(f"k{i}", "kp", "keypointlabels", w, h, {"x": 25, "y": 40 + i, "width": 2.5,
             "keypointlabels": ["eye"]}),
        _reg(f"e{i}", "ell", "ellipselabels", w, h, {"x": 50, "y": 50, "radiusX": 10 + i,
             "radiusY": 5, "rotation": 15, "ellipselabels": ["cat"]}),
        _reg(f"m{i}", "brush", "brushlabels", w, h, {"format": "rle", "rle": mask_to_rle(mask),
             "brushlabels": ["cat"]}),
        {"id": f"c{i}", "from_name": "cls", "to_name": "image", "type": "choices",
         "value": {"choices": ["indoor"]}},
        {"id": f"t{i}", "from_name": "caption", "to_name": "image", "type": "textarea",
         "value": {"text": [f"caption {i}"]}},
        {"id": f"x{i}", "from_name": "tax", "to_name": "image", "type": "taxonomy",
         "value": {"taxonomy": [["animal", "cat"]]}},
        {"id": f"g{i}", "from_name": "rate", "to_name": "image", "type": "rating",
         "value": {"rating": 4}},
        {"from_id": f"b{i}", "to_id": f"e{i}", "type": "relation", "direction": "right",
         "labels": ["near"]},
    ]


def masks_of(i: int, w: int, h: int) -> np.ndarray:
    mask = np.zeros((h, w), np.uint8)
    mask[2:2 + i + 3, 1:w // 2] = 1
    return mask


def make_export(root: Path, n: int = 6, corrupt: int | None = None,
                missing: int | None = None) -> Path:
    """Write ``n`` PNG tasks and export.json under ``root``; returns the export path.

    Task ``i`` (id 100+i): annotation 1 (older, box at x=1) and annotation 2 (newer, all
    types) by two annotators; task 0 also has a cancelled newest annotation and a
    prediction object. ``corrupt`` / ``missing``: task numbers with a broken / absent image.
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    tasks = []
    for i in range(n):
        w, h = SIZES[i % len(SIZES)]
        name = f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / name)
        if corrupt == i:
            (root / name).write_bytes(b"\x89PNG\r\n\x1a\nbroken")
        if missing == i:
            (root / name).unlink()
        older = [_reg(f"o{i}", "bbox", "rectanglelabels", w, h, {"x": 1, "y": 1, "width": 5,
                      "height": 5, "rotation": 0, "rectanglelabels": ["dog"]})]
        anns = [
            {"id": 10 * i + 1, "completed_by": 1, "result": older, "was_cancelled": False,
             "ground_truth": False, "created_at": "2026-01-01T00:00:00Z",
             "updated_at": "2026-01-01T00:00:00Z"},
            {"id": 10 * i + 2, "completed_by": 2, "result": full_results(i, w, h),
             "was_cancelled": False, "ground_truth": False, "created_at": "2026-01-02T00:00:00Z",
             "updated_at": "2026-01-02T00:00:00Z"},
        ]
        preds: list[Any] = []
        if i == 0:
            anns.append({"id": 9999, "completed_by": 3, "result": [], "was_cancelled": True,
                         "ground_truth": False, "created_at": "2026-01-03T00:00:00Z",
                         "updated_at": "2026-01-03T00:00:00Z"})
            preds.append({"id": 77, "model_version": "m", "score": 0.5, "result": [
                _reg("pr0", "bbox", "rectanglelabels", w, h, {"x": 50, "y": 50, "width": 10,
                     "height": 10, "rotation": 0, "rectanglelabels": ["cat"]})]})
        tasks.append({"id": 100 + i, "data": {"image": name}, "annotations": anns,
                      "predictions": preds})
    path = root / "export.json"
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path


def pixels(root: Path, i: int) -> np.ndarray:
    with Image.open(root / f"img{i}.png") as im:
        return np.asarray(im.convert("RGB"))
