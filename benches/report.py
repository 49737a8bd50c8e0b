"""Write bench results as results.json, results.md (Markdown tables) and chart.png (Pillow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

STAGES = ("read", "decode", "augment_cpu", "collate", "h2d", "augment")


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    """The Markdown report: setup, the main table, the stage breakdown and any sweeps."""
    cfg, mach = results["config"], results["machine"]
    lines = [
        "# npu-data bench results", "",
        f"{cfg['images']} JPEG images {cfg['width']}x{cfg['height']} (quality 90), "
        f"RandomResizedCrop({cfg['crop']}) + ColorJitter(0.4, 0.4, 0.4, 0.1) + horizontal flip, "
        f"boxes carried by the npu-data pipelines (the baseline transforms pixels only), batch {cfg['batch_size']}, {cfg['workers']} worker(s), "
        f"{cfg['warmup']} warm-up + {cfg['epochs']} measured epochs, interleaved.", "",
        f"Machine: {mach['cpus']} CPU(s), {mach['device']}, torch {mach['torch']}, "
        f"Python {mach['python']}.", "",
        "| pipeline | img/s (median) | min–max | vs baseline | peak memory MiB "
        "(main + workers) | bound by |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for p in results["pipelines"]:
        if p["status"] != "ok":
            lines.append(f"| {p['label']} | skipped: {p['reason']} | | | | |")
            continue
        mem = p.get("peak_memory_mib") or {}
        lines.append(
            f"| {p['label']} | {_fmt(p['median_img_s'])} | {_fmt(p['min_img_s'])}–"
            f"{_fmt(p['max_img_s'])} | {_fmt(p.get('ratio_to_baseline'), 2)} | "
            f"{_fmt(mem.get('total'))} ({_fmt(mem.get('main'))} + {_fmt(mem.get('workers'))})"
            f" | {p.get('bound_by') or '—'} |")
    lines += ["", "Peak memory: resident set of the main process and of all worker processes "
              "alive during that pipeline's epochs (every pipeline keeps its persistent workers, "
              "so the worker column includes the other pipelines' idle workers; shared pages "
              "count once per process).", "",
              "Stage cost, milliseconds per image, measured in one process over "
              f"{min(cfg['stage_samples'], cfg['images'])} samples (worker stages run in parallel across workers):",
              "", "| pipeline | " + " | ".join(STAGES) + " |",
              "|---|" + "---:|" * len(STAGES)]
    for p in results["pipelines"]:
        st = p.get("stages_ms_per_img")
        if p["status"] == "ok" and st:
            lines.append(f"| {p['label']} | " + " | ".join(
                _fmt(st.get(s), 3) if s in st else "—" for s in STAGES) + " |")
    for name, sweep in results.get("sweeps", {}).items():
        labels = sorted({k for row in sweep for k in row["img_s"]})
        lines += ["", f"Sweep over {name} (median img/s):", "",
                  f"| {name} | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
        for row in sweep:
            lines.append(f"| {row['value']} | " + " | ".join(
                _fmt(row["img_s"].get(lab)) for lab in labels) + " |")
    return "\n".join(lines) + "\n"


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has no sized default font
        return ImageFont.load_default()


def chart(results: dict[str, Any]) -> Image.Image:
    """A horizontal bar chart of median img/s with min–max whiskers and the baseline marked."""
    rows = [p for p in results["pipelines"] if p["status"] == "ok"]
    width, left, right, bar_h, gap, top = 1000, 330, 90, 34, 16, 70
    height = top + max(1, len(rows)) * (bar_h + gap) + 50
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    title, small = _font(20), _font(14)
    cfg = results["config"]
    draw.text((20, 15), f"images/s, median of {cfg['epochs']} epochs (higher is better)",
              fill="black", font=title)
    draw.text((20, 42), f"{cfg['images']} x {cfg['width']}x{cfg['height']} JPEG, crop "
              f"{cfg['crop']}, batch {cfg['batch_size']}, {cfg['workers']} worker(s), "
              f"{results['machine']['device']}", fill=(90, 90, 90), font=small)
    top_v = max([p["max_img_s"] for p in rows] + [1.0])
    scale = (width - left - right) / top_v
    base = next((p for p in rows if p["name"] == "baseline"), None)
    for k, p in enumerate(rows):
        y = top + k * (bar_h + gap)
        colour = (150, 150, 150) if p["name"] == "baseline" else (41, 98, 255)
        draw.text((20, y + 8), p["label"][:42], fill="black", font=small)
        x1 = left + p["median_img_s"] * scale
        draw.rectangle([left, y, x1, y + bar_h], fill=colour)
        lo, hi = left + p["min_img_s"] * scale, left + p["max_img_s"] * scale
        mid = y + bar_h // 2
        draw.line([lo, mid, hi, mid], fill="black", width=2)
        draw.line([lo, mid - 6, lo, mid + 6], fill="black", width=2)
        draw.line([hi, mid - 6, hi, mid + 6], fill="black", width=2)
        ratio = p.get("ratio_to_baseline")
        text = f"{p['median_img_s']:,.0f}" + (f"  {ratio:.2f}x" if ratio is not None else "")
        draw.text((hi + 8, y + 8), text, fill="black", font=small)
    if base is not None:
        bx = left + base["median_img_s"] * scale
        draw.line([bx, top - 6, bx, height - 40], fill=(200, 40, 40), width=1)
        draw.text((bx + 4, height - 36), "baseline", fill=(200, 40, 40), font=small)
    draw.line([left, top - 6, left, height - 40], fill="black", width=1)
    return img


def write_all(results: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write results.json, results.md and chart.png into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "md": out / "results.md", "chart": out / "chart.png"}
    paths["json"].write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    paths["md"].write_text(markdown(results))
    chart(results).save(paths["chart"])
    return paths
