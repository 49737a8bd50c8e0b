"""Draw a sample dict (docs/architecture.md) with its annotations, for previews."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
           (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]


def _colour(label: int) -> tuple[int, int, int]:
    return PALETTE[int(label) % len(PALETTE)] if label >= 0 else (255, 255, 255)


def _name(sample: dict[str, Any], group: str, j: int, labels: dict[str, list[str]],
          controls: list[str]) -> str:
    lab = int(sample[f"{group}.label"][j])
    ctrl = int(sample[f"{group}.control"][j])
    if lab < 0 or ctrl >= len(controls):
        return ""
    names = labels.get(controls[ctrl], [])
    return names[lab] if lab < len(names) else str(lab)


def ellipse_points(params: np.ndarray, n: int = 48) -> np.ndarray:
    """(E, n, 2) outline points of ellipses ``cx, cy, rx, ry, rotation`` (degrees, clockwise)."""
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    p = np.asarray(params, dtype=np.float64).reshape(-1, 5)
    th = np.deg2rad(p[:, 4])[:, None]
    ex, ey = p[:, 2:3] * np.cos(t), p[:, 3:4] * np.sin(t)
    x = p[:, 0:1] + ex * np.cos(th) - ey * np.sin(th)
    y = p[:, 1:2] + ex * np.sin(th) + ey * np.cos(th)
    return np.stack([x, y], axis=2)


def draw_sample(sample: dict[str, Any], labels: dict[str, list[str]],
                controls: list[str] | None = None, min_side: int = 384) -> Image.Image:
    """An RGB picture of ``sample``: masks translucent, boxes (rotated corners), polygons,
    keypoints, ellipses, label names and the caption. Small images are scaled up to
    ``min_side`` (integer factor) so the drawing stays legible."""
    ctrls = list(controls) if controls is not None else list(labels)
    img = np.asarray(sample["image"])
    h, w = img.shape[:2]
    s = max(1, min_side // max(1, max(h, w)))
    base = Image.fromarray(np.ascontiguousarray(img)).convert("RGBA")
    if s > 1:
        base = base.resize((w * s, h * s), Image.Resampling.NEAREST)
    masks = np.asarray(sample.get("masks.mask", np.zeros((0, h, w), np.uint8)))
    for j in range(len(masks)):
        colour = _colour(int(sample["masks.label"][j]))
        alpha = Image.fromarray((masks[j] > 0).astype(np.uint8) * 110)
        if s > 1:
            alpha = alpha.resize(base.size, Image.Resampling.NEAREST)
        layer = Image.new("RGBA", base.size, (*colour, 0))
        layer.putalpha(alpha)
        base = Image.alpha_composite(base, layer)
    draw = ImageDraw.Draw(base)
    font = ImageFont.load_default()
    width = max(1, s)

    def text(xy: tuple[float, float], label: str, colour: tuple[int, int, int]) -> None:
        if label:
            x, y = xy
            box = draw.textbbox((x, y - 11), label, font=font)
            draw.rectangle(box, fill=(0, 0, 0, 160))
            draw.text((x, y - 11), label, fill=colour, font=font)

    for j, c in enumerate(np.asarray(sample.get("boxes.corners", np.zeros((0, 4, 2))))):
        colour = _colour(int(sample["boxes.label"][j]))
        pts = [(float(x) * s, float(y) * s) for x, y in c]
        draw.polygon(pts, outline=colour, width=width)
        text(pts[0], _name(sample, "boxes", j, labels, ctrls), colour)
    off = np.asarray(sample.get("polygons.point_offsets", np.zeros(1, np.int64)))
    points = np.asarray(sample.get("polygons.points", np.zeros((0, 2))))
    for j in range(len(off) - 1):
        colour = _colour(int(sample["polygons.label"][j]))
        pts = [(float(x) * s, float(y) * s) for x, y in points[off[j]:off[j + 1]]]
        if len(pts) >= 2:
            closed = bool(sample["polygons.closed"][j])
            draw.line(pts + (pts[:1] if closed else []), fill=colour, width=width)
            text(pts[0], _name(sample, "polygons", j, labels, ctrls), colour)
    for j, (x, y) in enumerate(np.asarray(sample.get("keypoints.xy", np.zeros((0, 2))))):
        colour = _colour(int(sample["keypoints.label"][j]))
        r = max(3.0, float(sample["keypoints.size"][j]) * s / 2)
        draw.ellipse((x * s - r, y * s - r, x * s + r, y * s + r), outline=colour, width=width)
        text((x * s + r, y * s), _name(sample, "keypoints", j, labels, ctrls), colour)
    params = np.asarray(sample.get("ellipses.params", np.zeros((0, 5))))
    for j, outline in enumerate(ellipse_points(params)):
        colour = _colour(int(sample["ellipses.label"][j]))
        pts = [(float(x) * s, float(y) * s) for x, y in outline]
        draw.polygon(pts, outline=colour, width=width)
        text((float(params[j, 0]) * s, float(params[j, 1]) * s),
             _name(sample, "ellipses", j, labels, ctrls), colour)
    out = base.convert("RGB")
    caption = str(sample.get("caption", ""))
    if caption:
        band = Image.new("RGB", (out.width, out.height + 18), (0, 0, 0))
        band.paste(out, (0, 0))
        ImageDraw.Draw(band).text((4, out.height + 3), caption[:200], fill=(255, 255, 255),
                                  font=font)
        out = band
    return out
