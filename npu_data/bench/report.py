"""Write bench results as results.json, results.md (Markdown tables) and chart.png."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from npu_data.bench.chart import SWEEP_TITLES, chart
from npu_data.bench.stage_times import STAGES
from npu_data.common.atomic import atomic_write_bytes


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def _bound(p: dict[str, Any]) -> str:
    if not p.get("bound_by"):
        return "—"
    return f"{p['bound_by']} ({p.get('bound_kind') or '?'})"


def markdown(results: dict[str, Any]) -> str:
    """The Markdown report: setup, the main table, the stage breakdown and any sweeps."""
    cfg, mach = results["config"], results["machine"]
    lines = [
        "# npu-data bench results", "",
        f"{cfg['images']} JPEG images {cfg['width']}x{cfg['height']} (quality 90), "
        f"RandomResizedCrop({cfg['crop']}) + ColorJitter(0.4, 0.4, 0.4, 0.1) + horizontal flip, "
        f"boxes carried along by every pipeline, batch {cfg['batch_size']}, "
        f"{cfg['workers']} worker(s) each, npu-data decode={cfg.get('decode', 'exact')}, "
        f"{cfg['warmup']} warm-up + {cfg['epochs']} measured epochs, interleaved.", "",
        f"Machine: {mach['cpus']} CPU(s), {mach['device']}, torch {mach['torch']} "
        f"({mach.get('torch_threads', '?')} thread(s) in the main process), "
        f"Python {mach['python']}.", "",
        "| pipeline | img/s (median) | min–max | vs baseline | peak memory MiB "
        "(main + workers) | to device KiB/img | bound by |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in results["pipelines"]:
        if p["status"] != "ok":
            lines.append(f"| {p['label']} | skipped: {p['reason']} | | | | | |")
            continue
        mem = p.get("peak_memory_mib") or {}
        lines.append(
            f"| {p['label']} | {_fmt(p['median_img_s'])} | {_fmt(p['min_img_s'])}–"
            f"{_fmt(p['max_img_s'])} | {_fmt(p.get('ratio_to_baseline'), 2)} | "
            f"{_fmt(mem.get('total'))} ({_fmt(mem.get('main'))} + {_fmt(mem.get('workers'))})"
            f" | {_fmt(p.get('host_to_device_kib_per_img'))} | {_bound(p)} |")
    lines += ["", "Peak memory: resident set of the main process and of this pipeline's own "
              "worker processes during its measured epochs (shared pages count once per "
              "process; the main process holds every pipeline's loader). To device: bytes of "
              "the host batches handed to the device (copied on accelerators) per image.", "",
              "Peak anonymous memory per measured epoch, main + workers MiB (heap and "
              "buffers, what a leak grows; the memory-mapped shards' file pages, which the "
              "whole resident set above counts as they are touched, are not in it):", ""]
    for p in results["pipelines"]:
        epochs = p.get("peak_anon_mib_epochs") if p["status"] == "ok" else None
        if epochs:
            lines.append(f"- {p['label']}: " + " -> ".join(
                f"{_fmt(m)} + {_fmt(w)}" for m, w in epochs))
    lines += ["",
              "Stage cost, milliseconds per image, each stage timed alone in one process over "
              f"{min(cfg['stage_samples'], cfg['images'])} samples (median of 3 passes; read, decode, augment_cpu "
              "and collate run in the workers when there are any; h2d and augment on the main "
              "process). \"bound by\" is the costliest stage of the slower side "
              "(sum of worker stages / workers vs. main stages); \"stages allow\" is the img/s "
              "that side permits.", "",
              "| pipeline | " + " | ".join(STAGES) + " | bound by | stages allow img/s |",
              "|---|" + "---:|" * len(STAGES) + "---|---:|"]
    for p in results["pipelines"]:
        st = p.get("stages_ms_per_img")
        if p["status"] == "ok" and st:
            lines.append(f"| {p['label']} | " + " | ".join(
                _fmt(st.get(s), 3) if s in st else "—" for s in STAGES)
                + f" | {_bound(p)} | {_fmt(p.get('stage_img_s'))} |")
    roofs = [p for p in results["pipelines"] if p["status"] == "ok" and p.get("ceilings")]
    if roofs:
        lines += ["", "Ceilings: what this machine allows each row at all, from its stages "
                  "timed on one thread (ms per image on one core) spread over the cores this "
                  "process may use — reading only, decoding only what the crops need, the "
                  "kernels only (on the host), and all three (collate and copies not "
                  "counted); the row as a percentage of the combined ceiling.", "",
                  "| pipeline | read ms | decode ms | kernels ms | cores | read img/s | "
                  "decode img/s | kernels img/s | combined ceiling img/s | row % of it |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in roofs:
            c = p["ceilings"]
            lines.append(
                f"| {p['label']} | {_fmt(c['read_ms'], 3)} | {_fmt(c['decode_ms'], 3)} | "
                f"{_fmt(c['kernels_ms'], 3)} | {c['cores']} | {_fmt(c['read_img_s'])} | "
                f"{_fmt(c['decode_img_s'])} | {_fmt(c['kernels_img_s'])} | "
                f"{_fmt(c['ceiling_img_s'])} | {_fmt(p.get('pct_of_ceiling'))} |")
    names = {p["name"]: p["label"] for p in results["pipelines"]}
    for name, sweep in results.get("sweeps", {}).items():
        keys = list(dict.fromkeys(k for row in sweep for k in row["img_s"]))
        fixed = ", ".join(f"{k} {cfg[k]}" for k in ("workers", "batch_size", "crop") if k != name)
        if name == "image":
            fixed += f", {sweep[0].get('images', cfg['images'])} images per size"
        lines += ["", f"Sweep over {SWEEP_TITLES.get(name, name)} ({fixed}; img/s, 1 warm-up + "
                  f"{min(2, cfg['epochs'])} epoch(s), median):", "",
                  f"| {name} | " + " | ".join(names.get(k, k) for k in keys) + " |",
                  "|---|" + "---:|" * len(keys)]
        for row in sweep:
            lines.append(f"| {row['value']} | " + " | ".join(
                _fmt(row["img_s"].get(k)) for k in keys) + " |")
    return "\n".join(lines) + "\n"


def write_all(results: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write results.json, results.md and chart.png into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "md": out / "results.md", "chart": out / "chart.png"}
    atomic_write_bytes(paths["json"], (json.dumps(results, indent=2, sort_keys=True)
                                       + "\n").encode())
    atomic_write_bytes(paths["md"], markdown(results).encode())
    png = io.BytesIO()
    chart(results).save(png, "PNG")
    atomic_write_bytes(paths["chart"], png.getvalue())
    return paths
