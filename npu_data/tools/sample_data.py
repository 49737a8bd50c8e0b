"""Built-in sample data: textured JPEGs with a Label Studio export that uses every image type.

``make_sample_project`` writes a small, deterministic project (images, a full JSON export
shaped like a Label Studio 1.23 export, and the labeling config) whose annotations match
what is drawn in the pictures, so a preview shows boxes sitting on their objects.
``make_bench_images`` writes a larger boxes + captions project for benchmarks.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from npu_data.progress import progress

__all__ = [
    "SampleProject", "Scene", "encode_rle", "make_bench_images", "make_sample_project",
    "scene_for", "SAMPLE_CONFIG",
]

BOX_LABELS = ["box", "disc", "triangle"]
COLOURS = {
    "red": (214, 48, 49), "green": (39, 174, 96), "blue": (41, 98, 255),
    "yellow": (241, 196, 15), "purple": (142, 68, 173), "orange": (230, 126, 34),
    "white": (236, 240, 241), "black": (30, 30, 30),
}

SAMPLE_CONFIG = """<View>
  <Image name="image" value="$image"/>
  <RectangleLabels name="bbox" toName="image">
    <Label value="box"/><Label value="disc"/><Label value="triangle"/>
  </RectangleLabels>
  <PolygonLabels name="poly" toName="image">
    <Label value="triangle"/>
  </PolygonLabels>
  <KeyPointLabels name="kp" toName="image">
    <Label value="corner"/><Label value="centre"/>
  </KeyPointLabels>
  <EllipseLabels name="ell" toName="image">
    <Label value="disc"/>
  </EllipseLabels>
  <BrushLabels name="brush" toName="image">
    <Label value="disc"/>
  </BrushLabels>
  <Choices name="cls" toName="image">
    <Choice value="warm"/><Choice value="cool"/>
  </Choices>
  <TextArea name="caption" toName="image"/>
  <TextArea name="note" toName="image" perRegion="true"/>
  <Taxonomy name="tax" toName="image">
    <Choice value="shapes">
      <Choice value="angular"><Choice value="box"/><Choice value="triangle"/></Choice>
      <Choice value="round"><Choice value="disc"/></Choice>
    </Choice>
  </Taxonomy>
  <Rating name="rate" toName="image" maxRating="5"/>
  <Number name="num" toName="image" min="0" max="20"/>
  <Relations>
    <Relation value="near"/><Relation value="above"/>
  </Relations>
</View>
"""

BENCH_CONFIG = """<View>
  <Image name="image" value="$image"/>
  <RectangleLabels name="bbox" toName="image">
    <Label value="box"/><Label value="disc"/><Label value="triangle"/>
  </RectangleLabels>
  <TextArea name="caption" toName="image"/>
</View>
"""


@dataclass(frozen=True)
class SampleProject:
    """Where a generated project lives: the export, the images folder and the labeling config."""

    export_path: Path
    images_dir: Path
    config_path: Path

    @property
    def root(self) -> Path:
        """The folder holding everything; image references in the export are relative to it."""
        return self.export_path.parent


@dataclass
class Scene:
    """The ground truth of one generated image, in pixels of the stored image."""

    width: int
    height: int
    # rectangles: (x, y, w, h, rotation_degrees) top-left fixed, Label Studio semantics
    rects: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    rect_colours: list[str] = field(default_factory=list)
    # the disc: (cx, cy, rx, ry, rotation_degrees)
    disc: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    disc_colour: str = ""
    triangle: list[tuple[float, float]] = field(default_factory=list)
    triangle_colour: str = ""
    warm: bool = True

    def rect_corners(self, k: int) -> np.ndarray:
        """The 4 pixel corners of rectangle ``k`` (Label Studio's rotation about the top-left)."""
        return rect_corners(*self.rects[k])

    def disc_mask(self) -> np.ndarray:
        """(H, W) bool: pixels whose centre lies inside the disc (the brush mask)."""
        cx, cy, rx, ry, r = self.disc
        yy, xx = np.mgrid[0:self.height, 0:self.width].astype(np.float64)
        dx, dy = xx + 0.5 - cx, yy + 0.5 - cy
        c, s = math.cos(math.radians(r)), math.sin(math.radians(r))
        u, v = dx * c + dy * s, -dx * s + dy * c
        return bool_mask((u / rx) ** 2 + (v / ry) ** 2 <= 1.0)

    def disc_envelope(self) -> tuple[float, float, float, float]:
        """Axis-aligned ``x0, y0, x1, y1`` around the (possibly rotated) disc."""
        cx, cy, rx, ry, r = self.disc
        c, s = math.cos(math.radians(r)), math.sin(math.radians(r))
        hx, hy = math.hypot(rx * c, ry * s), math.hypot(rx * s, ry * c)
        return cx - hx, cy - hy, cx + hx, cy + hy

    def triangle_envelope(self) -> tuple[float, float, float, float]:
        """Axis-aligned ``x0, y0, x1, y1`` around the triangle."""
        pts = np.array(self.triangle)
        return float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(
            pts[:, 1].max())

    def caption(self) -> str:
        """A one-sentence description of what is drawn."""
        parts = [f"{_a(c)} {c} box" for c in self.rect_colours]
        parts.append(f"{_a(self.disc_colour)} {self.disc_colour} disc")
        parts.append(f"{_a(self.triangle_colour)} {self.triangle_colour} triangle")
        ground = "warm" if self.warm else "cool"
        return f"{', '.join(parts[:-1])} and {parts[-1]} on a {ground} textured background"


def rect_corners(x: float, y: float, w: float, h: float, rotation: float) -> np.ndarray:
    """(4, 2) pixel corners of a rectangle turned clockwise by ``rotation`` degrees about its
    top-left corner, written out per corner as the ground truth the pipeline is tested against
    (independent of ``kinds.boxes.box_pixels``)."""
    c, s = math.cos(math.radians(rotation)), math.sin(math.radians(rotation))
    return np.array([[x, y], [x + w * c, y + w * s], [x + w * c - h * s, y + w * s + h * c],
                     [x - h * s, y + h * c]], dtype=np.float64)


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def bool_mask(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous bool array."""
    return np.ascontiguousarray(a, dtype=bool)


# ---------------------------------------------------------------- pictures

def _rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


def texture(rng: np.random.Generator, width: int, height: int, warm: bool | None = None
            ) -> tuple[np.ndarray, bool]:
    """A textured RGB background (gradient + smooth noise + waves + grain) and whether it is warm."""
    if warm is None:
        warm = bool(rng.random() < 0.5)
    base = np.array([200, 120, 60] if warm else [60, 120, 200], dtype=np.float32)
    c0 = np.clip(base + rng.normal(0, 30, 3), 0, 255).astype(np.float32)
    c1 = np.clip(base * 0.45 + rng.normal(0, 25, 3), 0, 255).astype(np.float32)
    theta = rng.uniform(0, 2 * math.pi)
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    t = xs * math.cos(theta) + ys * math.sin(theta)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    img = c0 * (1 - t[..., None]) + c1 * t[..., None]
    gw, gh = max(2, width // 40), max(2, height // 40)
    coarse = rng.normal(0, 1, (gh, gw, 3)).astype(np.float32)
    blob = Image.fromarray(np.clip(coarse * 40 + 128, 0, 255).astype(np.uint8))
    img += np.asarray(blob.resize((width, height), Image.Resampling.BICUBIC), np.float32) - 128
    fx, fy = rng.uniform(0.02, 0.12, 2)
    img += (10 * np.sin(xs * fx + ys * fy + rng.uniform(0, 6.3)))[..., None]
    img += rng.integers(-12, 13, (height, width, 1), dtype=np.int16)
    return np.clip(img, 0, 255).astype(np.uint8), warm


def _shade(rgb: tuple[int, int, int], k: float) -> tuple[int, int, int]:
    return (int(rgb[0] * k), int(rgb[1] * k), int(rgb[2] * k))


def _pick_colours(rng: np.random.Generator, n: int) -> list[str]:
    names = list(COLOURS)
    return [names[i] for i in rng.permutation(len(names))[:n]]


def _place_rect(rng: np.random.Generator, w: int, h: int, rotated: bool
                ) -> tuple[float, float, float, float, float]:
    side = min(w, h)
    for _ in range(100):
        bw, bh = rng.uniform(0.15, 0.35) * side, rng.uniform(0.12, 0.3) * side
        rot = float(rng.uniform(15, 40)) if rotated else 0.0
        x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        xs, ys = rect_corners(x, y, bw, bh, rot).T
        if xs.min() >= 1 and xs.max() <= w - 1 and ys.min() >= 1 and ys.max() <= h - 1:
            return (round(x, 2), round(y, 2), round(bw, 2), round(bh, 2), round(rot, 2))
    return (w * 0.1, h * 0.1, w * 0.2, h * 0.2, 0.0)


def scene_for(index: int, width: int = 500, height: int = 375, seed: int = 0,
              n_rects: int | None = None) -> Scene:
    """The deterministic ground truth of image ``index`` (what ``make_sample_project`` draws)."""
    rng = _rng(seed, index)
    scene = Scene(width=width, height=height)
    scene.warm = bool(rng.random() < 0.5)
    k = n_rects if n_rects is not None else 1 + int(rng.integers(0, 2))
    colours = _pick_colours(rng, k + 2)
    for j in range(k):
        scene.rects.append(_place_rect(rng, width, height, rotated=(j == 0 and index % 3 == 1)))
    scene.rect_colours = colours[:k]
    side = min(width, height)
    rx, ry = rng.uniform(0.08, 0.16) * side, rng.uniform(0.06, 0.14) * side
    rot = float(rng.choice([0.0, 0.0, rng.uniform(10, 60)]))
    m = max(rx, ry) + 4
    cx, cy = rng.uniform(m, width - m), rng.uniform(m, height - m)
    scene.disc = (round(cx, 2), round(cy, 2), round(rx, 2), round(ry, 2), round(rot, 2))
    scene.disc_colour = colours[k]
    tcx, tcy = rng.uniform(0.2 * width, 0.8 * width), rng.uniform(0.2 * height, 0.8 * height)
    r = rng.uniform(0.08, 0.15) * side
    a0 = rng.uniform(0, 2 * math.pi)
    scene.triangle = [(round(tcx + r * math.cos(a0 + q * 2.0944), 2),
                       round(tcy + r * math.sin(a0 + q * 2.0944), 2)) for q in range(3)]
    scene.triangle_colour = colours[k + 1]
    return scene


def render(scene: Scene, rng: np.random.Generator) -> Image.Image:
    """Draw ``scene`` over a fresh texture (the ground truth's colour is ``scene.warm``)."""
    pixels, _ = texture(rng, scene.width, scene.height, scene.warm)
    mask = scene.disc_mask()
    disc_rgb = np.array(COLOURS[scene.disc_colour], dtype=np.int16)
    grain = rng.integers(-18, 19, pixels.shape, dtype=np.int16)
    pixels[mask] = np.clip(disc_rgb + grain[mask], 0, 255).astype(np.uint8)
    img = Image.fromarray(pixels)
    draw = ImageDraw.Draw(img)
    for k, name in enumerate(scene.rect_colours):
        corners = [tuple(p) for p in scene.rect_corners(k).tolist()]
        draw.polygon(corners, fill=COLOURS[name], outline=_shade(COLOURS[name], 0.5), width=3)
        # inner stripes so the texture survives a crop
        x, y, w, h, r = scene.rects[k]
        c, s = math.cos(math.radians(r)), math.sin(math.radians(r))
        for q in range(1, 4):
            t = q / 4 * h
            a = (x - t * s, y + t * c)
            b = (x + w * c - t * s, y + w * s + t * c)
            draw.line([a, b], fill=_shade(COLOURS[name], 0.75), width=2)
    tri = COLOURS[scene.triangle_colour]
    draw.polygon(scene.triangle, fill=tri, outline=_shade(tri, 0.5), width=3)
    return img


def _texture_with_boxes(rng: np.random.Generator, width: int, height: int
                        ) -> tuple[Image.Image, list[tuple[float, float, float, float]], list[str],
                                   str]:
    pixels, warm = texture(rng, width, height)
    img = Image.fromarray(pixels)
    draw = ImageDraw.Draw(img)
    boxes: list[tuple[float, float, float, float]] = []
    labels: list[str] = []
    k = 1 + int(rng.integers(0, 3))
    colours = _pick_colours(rng, k)
    for name in colours:
        x, y, w, h, _ = _place_rect(rng, width, height, rotated=False)
        label = BOX_LABELS[int(rng.integers(0, 3))]
        rgb = COLOURS[name]
        if label == "disc":
            draw.ellipse([x, y, x + w, y + h], fill=rgb, outline=_shade(rgb, 0.5), width=3)
        elif label == "triangle":
            draw.polygon([(x + w / 2, y), (x + w, y + h), (x, y + h)], fill=rgb,
                         outline=_shade(rgb, 0.5), width=3)
        else:
            draw.rectangle([x, y, x + w, y + h], fill=rgb, outline=_shade(rgb, 0.5), width=3)
        boxes.append((x, y, w, h))
        labels.append(label)
    parts = [f"{_a(c)} {c} {lab}" for c, lab in zip(colours, labels, strict=True)]
    ground = "warm" if warm else "cool"
    caption = (", ".join(parts[:-1]) + " and " if len(parts) > 1 else "") + parts[-1]
    return img, boxes, labels, f"{caption} on a {ground} background"


# ---------------------------------------------------------------- brush RLE

def encode_rle(flat: np.ndarray) -> list[int]:
    """Label Studio's brush RLE (thi.ng rle-pack, word size 8, run sizes 3/4/8/16) of ``flat``.

    ``flat`` is the H·W·4 RGBA uint8 array; ``label_studio_sdk.converter.brush.decode_rle``
    gives it back.
    """
    arr = np.asarray(flat, dtype=np.uint8).ravel()
    n = int(arr.size)
    fields: list[tuple[int, int]] = [(n, 32), (7, 5), (2, 4), (3, 4), (7, 4), (15, 4)]
    if n:
        change = np.flatnonzero(arr[1:] != arr[:-1]) + 1
        starts = np.concatenate([[0], change])
        lengths = np.diff(np.concatenate([starts, [n]]))
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
            value = int(arr[start])
            while length > 0:
                chunk = min(length, 1 << 16)
                idx, bits = next((i, b) for i, b in enumerate((3, 4, 8, 16)) if chunk <= 1 << b)
                fields += [(1, 1), (idx, 2), (chunk - 1, bits), (value, 8)]
                length -= chunk
    text = "".join(format(v, f"0{b}b") for v, b in fields)
    text += "0" * (-len(text) % 8)
    bitarray = np.frombuffer(text.encode("ascii"), dtype=np.uint8) - ord("0")
    return [int(b) for b in np.packbits(bitarray)]


def mask_to_rle(mask: np.ndarray) -> list[int]:
    """The brush RLE of an (H, W) boolean mask (RGBA 255 inside, 0 outside, like the editor)."""
    rgba = np.repeat(bool_mask(mask)[..., None], 4, axis=2).astype(np.uint8) * 255
    return encode_rle(rgba.ravel())


# ---------------------------------------------------------------- export

_T0 = 1_796_000_000  # 2026-11-29, a fixed epoch so exports are byte-identical


def _stamp(seconds: int) -> str:
    import datetime as _dt

    t = _dt.datetime.fromtimestamp(_T0 + seconds, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{(seconds * 7919) % 1_000_000:06d}Z"


def _pct(v: float, total: int) -> float:
    return v / total * 100.0


class _Ids:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.annotation = 0
        self.prediction = 0

    def rid(self) -> str:
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
        return "".join(alphabet[i] for i in self.rng.integers(0, len(alphabet), 10))

    def uuid(self) -> str:
        return str(uuid.UUID(bytes=self.rng.bytes(16), version=4))


def _region(rid: str, from_name: str, kind: str, w: int, h: int, value: dict[str, Any],
            **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rid, "type": kind, "value": value, "origin": "manual",
                           "to_name": "image", "from_name": from_name,
                           "image_rotation": 0, "original_width": w, "original_height": h}
    out.update(extra)
    return out


def _classification(rid: str, from_name: str, kind: str, value: dict[str, Any]
                    ) -> dict[str, Any]:
    return {"id": rid, "type": kind, "value": value, "origin": "manual", "to_name": "image",
            "from_name": from_name}


def _rect_value(x: float, y: float, bw: float, bh: float, rot: float, w: int, h: int,
                label: str) -> dict[str, Any]:
    return {"x": _pct(x, w), "y": _pct(y, h), "width": _pct(bw, w), "height": _pct(bh, h),
            "rotation": rot, "rectanglelabels": [label]}


def _full_results(scene: Scene, ids: _Ids, jitter: float = 0.0) -> list[dict[str, Any]]:
    w, h = scene.width, scene.height
    rng = ids.rng
    out: list[dict[str, Any]] = []
    rect_ids = []
    region_note: dict[str, Any] = {}
    for k, rect in enumerate(scene.rects):
        x, y, bw, bh, rot = rect
        if jitter:
            x, y = x + rng.uniform(-jitter, jitter), y + rng.uniform(-jitter, jitter)
        rid = ids.rid()
        rect_ids.append(rid)
        out.append(_region(rid, "bbox", "rectanglelabels", w, h,
                           _rect_value(x, y, bw, bh, rot, w, h, "box")))
        if k == 0:  # a per-region note, exported after the image caption
            note = {**_rect_value(x, y, bw, bh, rot, w, h, "box"),
                    "text": [f"{scene.rect_colours[0]} box"]}
            del note["rectanglelabels"]
            region_note = _region(rid, "note", "textarea", w, h, note)
    x0, y0, x1, y1 = scene.disc_envelope()
    disc_box = ids.rid()
    out.append(_region(disc_box, "bbox", "rectanglelabels", w, h,
                       _rect_value(x0, y0, x1 - x0, y1 - y0, 0.0, w, h, "disc")))
    x0, y0, x1, y1 = scene.triangle_envelope()
    out.append(_region(ids.rid(), "bbox", "rectanglelabels", w, h,
                       _rect_value(x0, y0, x1 - x0, y1 - y0, 0.0, w, h, "triangle")))
    out.append(_region(ids.rid(), "poly", "polygonlabels", w, h, {
        "points": [[_pct(px, w), _pct(py, h)] for px, py in scene.triangle], "closed": True,
        "polygonlabels": ["triangle"]}))
    cx, cy, rx, ry, rot = scene.disc
    ell = ids.rid()
    out.append(_region(ell, "ell", "ellipselabels", w, h, {
        "x": _pct(cx, w), "y": _pct(cy, h), "radiusX": _pct(rx, w), "radiusY": _pct(ry, h),
        "rotation": rot, "ellipselabels": ["disc"]}))
    corner = scene.rect_corners(0)[0]
    out.append(_region(ids.rid(), "kp", "keypointlabels", w, h, {
        "x": _pct(float(corner[0]), w), "y": _pct(float(corner[1]), h), "width": 0.5,
        "keypointlabels": ["corner"]}))
    out.append(_region(ids.rid(), "kp", "keypointlabels", w, h, {
        "x": _pct(cx, w), "y": _pct(cy, h), "width": 0.5, "keypointlabels": ["centre"]}))
    out.append(_region(ids.rid(), "brush", "brushlabels", w, h, {
        "format": "rle", "rle": mask_to_rle(scene.disc_mask()), "brushlabels": ["disc"]}))
    out.append(_classification(ids.rid(), "cls", "choices",
                               {"choices": ["warm" if scene.warm else "cool"]}))
    out.append(_classification(ids.rid(), "caption", "textarea", {"text": [scene.caption()]}))
    out.append(region_note)
    out.append(_classification(ids.rid(), "tax", "taxonomy", {"taxonomy": [
        ["shapes", "angular", "box"], ["shapes", "round", "disc"]]}))
    n_obj = len(scene.rects) + 2
    out.append(_classification(ids.rid(), "rate", "rating", {"rating": min(5, n_obj)}))
    out.append(_classification(ids.rid(), "num", "number", {"number": n_obj}))
    out.append({"from_id": rect_ids[0], "to_id": ell, "type": "relation", "direction": "right",
                "labels": ["near"]})
    out.append({"from_id": disc_box, "to_id": rect_ids[-1], "type": "relation",
                "direction": "bi", "labels": []})
    return out


def _second_opinion(scene: Scene, ids: _Ids) -> list[dict[str, Any]]:
    w, h = scene.width, scene.height
    out = []
    for rect in scene.rects:
        x, y, bw, bh, rot = rect
        out.append(_region(ids.rid(), "bbox", "rectanglelabels", w, h, _rect_value(
            x + 2.0, y - 1.5, bw * 0.97, bh * 1.02, rot, w, h, "box")))
    out.append(_classification(ids.rid(), "cls", "choices",
                               {"choices": ["warm" if scene.warm else "cool"]}))
    out.append(_classification(ids.rid(), "caption", "textarea",
                               {"text": [f"{len(scene.rects) + 2} coloured shapes"]}))
    return out


def _annotation(ids: _Ids, task_id: int, user: int, result: list[dict[str, Any]], t: int,
                cancelled: bool = False, ground_truth: bool = False) -> dict[str, Any]:
    ids.annotation += 1
    return {
        "id": ids.annotation, "completed_by": user, "result": result,
        "was_cancelled": cancelled, "ground_truth": ground_truth,
        "created_at": _stamp(t), "updated_at": _stamp(t + 30), "draft_created_at": None,
        "lead_time": round(12.5 + (t % 97) * 0.731, 3), "prediction": {}, "result_count": 0,
        "unique_id": ids.uuid(), "import_id": None, "last_action": None, "bulk_created": False,
        "task": task_id, "project": 1, "updated_by": None, "parent_prediction": None,
        "parent_annotation": None, "last_created_by": None,
    }


def _prediction(ids: _Ids, task_id: int, scene: Scene, t: int) -> dict[str, Any]:
    ids.prediction += 1
    w, h = scene.width, scene.height
    result = []
    for k, rect in enumerate(scene.rects):
        x, y, bw, bh, rot = rect
        item = _region(ids.rid(), "bbox", "rectanglelabels", w, h,
                       _rect_value(x + 3, y + 3, bw - 2, bh - 4, rot, w, h, "box"),
                       score=round(0.93 - 0.11 * k, 3))
        item["origin"] = "prediction"
        result.append(item)
    return {"id": ids.prediction, "result": result, "model_version": "sample-detector-v1",
            "created_ago": "0 minutes", "score": 0.87, "cluster": None, "neighbors": None,
            "mislabeling": 0.0, "created_at": _stamp(t), "updated_at": _stamp(t),
            "model": None, "model_run": None, "task": task_id, "project": 1}


def _task(task_id: int, image_ref: str, annotations: list[dict[str, Any]],
          predictions: list[Any], t: int) -> dict[str, Any]:
    done = sum(not a["was_cancelled"] for a in annotations)
    return {
        "id": task_id, "annotations": annotations, "drafts": [], "predictions": predictions,
        "data": {"image": image_ref}, "meta": {}, "created_at": _stamp(t),
        "updated_at": _stamp(t + 3600), "allow_skip": True, "inner_id": task_id,
        "total_annotations": done, "cancelled_annotations": len(annotations) - done,
        "total_predictions": len(predictions), "comment_count": 0,
        "unresolved_comment_count": 0, "last_comment_updated_at": None, "project": 1,
        "updated_by": None, "comment_authors": [],
    }


def _write_json(path: Path, tasks: list[dict[str, Any]]) -> None:
    from npu_data.common.atomic import atomic_write_bytes

    atomic_write_bytes(path, json.dumps(tasks, ensure_ascii=False, indent=1).encode("utf-8"))


def _sizes(n: int, width: int, height: int) -> Iterator[tuple[int, int]]:
    for i in range(n):
        yield (height, width) if i % 6 == 5 else (width, height)


def make_sample_project(out_dir: str | Path, n_images: int = 24, width: int = 500,
                        height: int = 375, seed: int = 0) -> SampleProject:
    """Write a deterministic demo project into ``out_dir`` and return where its parts are.

    ``out_dir/images/sample_NNNN.jpg`` (JPEG quality 90; every sixth image is portrait,
    ``height`` x ``width``), ``out_dir/export.json`` (a Label Studio full JSON export with
    rectangles, rotated rectangles, polygons, keypoints, ellipses, brush masks, choices,
    captions, per-region notes, taxonomy, rating, number and relations; two annotators on
    every fourth task, a cancelled annotation on task 2, a ground-truth annotation on task 1,
    model predictions on every third task, the last task unlabeled when there are 4 or more)
    and ``out_dir/labeling_config.xml``. Image references are relative to ``out_dir``.
    The same arguments always give byte-identical files.
    """
    if n_images < 1 or width < 32 or height < 32:
        from npu_data.errors import UserError

        raise UserError(f"{out_dir}: a sample project needs n_images >= 1 and images of at "
                        f"least 32x32 pixels (got {n_images} of {width}x{height})")
    root = Path(out_dir)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    ids = _Ids(_rng(seed, -1 % (1 << 32)))
    tasks = []
    for i, (w, h) in enumerate(progress(_sizes(n_images, width, height), total=n_images,
                                        desc="sample images", unit="img")):
        task_id = i + 1
        scene = scene_for(i, w, h, seed)
        name = f"images/sample_{task_id:04d}.jpg"
        render(scene, _rng(seed, 1_000_000 + i)).save(root / name, quality=90)
        t = i * 600
        annotations: list[dict[str, Any]] = []
        predictions: list[Any] = []
        if not (n_images >= 4 and i == n_images - 1):
            annotations.append(_annotation(ids, task_id, 1, _full_results(scene, ids), t + 60,
                                           ground_truth=(i == 0)))
        if i % 4 == 0 and annotations:
            annotations.append(_annotation(ids, task_id, 2, _second_opinion(scene, ids), t + 300))
        if i == 1:
            annotations.append(_annotation(ids, task_id, 3, [], t + 400, cancelled=True))
        if i % 3 == 0:
            predictions.append(_prediction(ids, task_id, scene, t + 10))
        tasks.append(_task(task_id, name, annotations, predictions, t))
    export = root / "export.json"
    _write_json(export, tasks)
    config = root / "labeling_config.xml"
    config.write_text(SAMPLE_CONFIG, encoding="utf-8")
    return SampleProject(export_path=export, images_dir=images, config_path=config)


def make_bench_images(out_dir: str | Path, n: int = 2000, width: int = 500, height: int = 375,
                      seed: int = 0) -> SampleProject:
    """Write ``n`` textured JPEGs (quality 90) with 1-3 drawn objects and a boxes + captions export.

    Deterministic; reuses nothing (callers decide whether an existing folder is reusable).
    """
    root = Path(out_dir)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    ids = _Ids(_rng(seed, -2 % (1 << 32)))
    tasks = []
    for i in progress(range(n), total=n, desc="bench images", unit="img"):
        img, boxes, labels, caption = _texture_with_boxes(_rng(seed, i), width, height)
        name = f"images/bench_{i + 1:06d}.jpg"
        img.save(root / name, quality=90)
        result = [_region(ids.rid(), "bbox", "rectanglelabels", width, height,
                          _rect_value(x, y, bw, bh, 0.0, width, height, lab))
                  for (x, y, bw, bh), lab in zip(boxes, labels, strict=True)]
        result.append(_classification(ids.rid(), "caption", "textarea", {"text": [caption]}))
        tasks.append(_task(i + 1, name, [_annotation(ids, i + 1, 1, result, i * 60)], [], i * 60))
    export = root / "export.json"
    _write_json(export, tasks)
    config = root / "labeling_config.xml"
    config.write_text(BENCH_CONFIG, encoding="utf-8")
    return SampleProject(export_path=export, images_dir=images, config_path=config)
