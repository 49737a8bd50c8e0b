"""The bench PNG (Pillow only): a bar per pipeline, then one line panel per sweep."""

from __future__ import annotations

from typing import Any

from PIL import Image, ImageDraw, ImageFont

Font = ImageFont.ImageFont | ImageFont.FreeTypeFont
COLOURS = [(41, 98, 255), (0, 150, 110), (230, 120, 0), (170, 60, 200), (200, 40, 40)]
GREY = (150, 150, 150)
WIDTH = 1000
PANEL_H = 300
SWEEP_TITLES = {"workers": "workers", "batch_size": "batch size", "crop": "crop (output) size",
                "image": "input image size"}


def _font(size: int) -> Font:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has no sized default font
        return ImageFont.load_default()


def _colours(results: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    names = [p["name"] for p in results["pipelines"] if p["name"] != "baseline"]
    return {"baseline": GREY, **{n: COLOURS[k % len(COLOURS)] for k, n in enumerate(names)}}


def _bars(draw: ImageDraw.ImageDraw, results: dict[str, Any], rows: list[dict[str, Any]],
          top: int, height: int) -> None:
    left, right, bar_h, gap = 330, 90, 34, 16
    small = _font(14)
    colour = _colours(results)
    scale = (WIDTH - left - right) / max([p["max_img_s"] for p in rows] + [1.0])
    for k, p in enumerate(rows):
        y = top + k * (bar_h + gap)
        draw.text((20, y + 8), p["label"][:42], fill="black", font=small)
        draw.rectangle([left, y, left + p["median_img_s"] * scale, y + bar_h],
                       fill=colour[p["name"]])
        lo, hi = left + p["min_img_s"] * scale, left + p["max_img_s"] * scale
        mid = y + bar_h // 2
        draw.line([lo, mid, hi, mid], fill="black", width=2)
        draw.line([lo, mid - 6, lo, mid + 6], fill="black", width=2)
        draw.line([hi, mid - 6, hi, mid + 6], fill="black", width=2)
        ratio = p.get("ratio_to_baseline")
        text = f"{p['median_img_s']:,.0f}" + (f"  {ratio:.2f}x" if ratio is not None else "")
        draw.text((hi + 8, y + 8), text, fill="black", font=small)
    base = next((p for p in rows if p["name"] == "baseline"), None)
    if base is not None:
        bx = left + base["median_img_s"] * scale
        draw.line([bx, top - 6, bx, height - 40], fill=(200, 40, 40), width=1)
        draw.text((bx + 4, height - 36), "baseline", fill=(200, 40, 40), font=small)
    draw.line([left, top - 6, left, height - 40], fill="black", width=1)


def _panel(draw: ImageDraw.ImageDraw, name: str, sweep: list[dict[str, Any]],
           colour: dict[str, tuple[int, int, int]], box: tuple[int, int, int, int]) -> None:
    x0, y0, x1, y1 = box
    small = _font(13)
    draw.text((x0, y0), f"img/s vs {SWEEP_TITLES.get(name, name)}", fill="black",
              font=_font(15))
    px0, py0, px1, py1 = x0 + 45, y0 + 28, x1 - 10, y1 - 30
    top_v = max([v for row in sweep for v in row["img_s"].values()] + [1.0])
    draw.line([px0, py0, px0, py1, px1, py1], fill="black", width=1)
    draw.text((x0, py0 - 6), f"{top_v:,.0f}", fill=(90, 90, 90), font=small)
    draw.text((x0 + 25, py1 - 8), "0", fill=(90, 90, 90), font=small)
    n = len(sweep)
    xs = [px0 + (px1 - px0) * (k + 0.5) / n for k in range(n)]
    for x, row in zip(xs, sweep, strict=True):
        draw.text((x - 8, py1 + 6), str(row["value"]), fill="black", font=small)
    for key in dict.fromkeys(k for row in sweep for k in row["img_s"]):
        pts = [(x, py1 - (py1 - py0) * row["img_s"][key] / top_v)
               for x, row in zip(xs, sweep, strict=True) if key in row["img_s"]]
        c = colour.get(key, (0, 0, 0))
        if len(pts) > 1:
            draw.line(pts, fill=c, width=3)
        for x, y in pts:
            draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=c)


def chart(results: dict[str, Any]) -> Image.Image:
    """Bars of median img/s (min–max whiskers, baseline marked); sweeps as line panels."""
    rows = [p for p in results["pipelines"] if p["status"] == "ok"]
    sweeps = results.get("sweeps") or {}
    top = 70
    bars_h = top + max(1, len(rows)) * 50 + 50
    height = bars_h + (PANEL_H + 40 if sweeps else 0)
    img = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(img)
    cfg = results["config"]
    draw.text((20, 15), f"images/s, median of {cfg['epochs']} epochs (higher is better)",
              fill="black", font=_font(20))
    draw.text((20, 42), f"{cfg['images']} x {cfg['width']}x{cfg['height']} JPEG, crop "
              f"{cfg['crop']}, batch {cfg['batch_size']}, {cfg['workers']} worker(s), "
              f"{results['machine']['device']}", fill=(90, 90, 90), font=_font(14))
    _bars(draw, results, rows, top, bars_h)
    if sweeps:
        colour = _colours(results)
        w = (WIDTH - 40) // len(sweeps)
        for k, (name, sweep) in enumerate(sweeps.items()):
            _panel(draw, name, sweep, colour,
                   (20 + k * w, bars_h, 20 + (k + 1) * w - 20, bars_h + PANEL_H))
        x = 20
        for p in rows:
            if p["name"] in {key for s in sweeps.values() for r in s for key in r["img_s"]}:
                draw.rectangle([x, height - 28, x + 14, height - 14], fill=colour[p["name"]])
                draw.text((x + 20, height - 30), p["label"][:40], fill="black", font=_font(13))
                x += 320
    return img
