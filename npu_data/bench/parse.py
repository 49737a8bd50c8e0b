"""Benchmark: Label Studio export parsing — npu_data vs a stdlib-json parser vs the SDK.

    python -m npu_data.bench.parse --tasks 100000 --out DIR     (``--tasks 20000`` runs in ~1 min)
    python -m npu_data.bench.parse --tasks 100000 --parsers npu_data,stdlib --runs 3   (median of 3)
    python -m npu_data.bench.parse --tasks 2000 --brush 4 --parsers npu_data   (brush-heavy export)

Generates an export of N tasks (5 rectangles and a caption each, and ``--brush K`` brush masks
of 1280x960, see npu_data/bench/brush.py: npu_data decodes every mask, the stdlib parser skips them),
then runs every parser
(``--runs`` times, in turn) in a fresh subprocess; ``x stdlib`` is the speed-up over the
stdlib-json parser. Peak memory = the subprocess's peak resident set (``VmHWM`` from
/proc/self/status; ``ru_maxrss`` elsewhere, which Linux carries over from the parent across
exec) after the parse minus the same figure after imports (the interpreter + library
baseline). Writes ``parse.json`` in DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from npu_data.bench.brush import brush_results, rle_pool

CONFIG = """<View><Image name="image" value="$image"/>
<RectangleLabels name="bbox" toName="image"><Label value="cat"/><Label value="dog"/>
<Label value="car"/></RectangleLabels><TextArea name="caption" toName="image"/></View>"""
LABELS = ("cat", "dog", "car")


def generate(path: Path, n: int, seed: int = 0, brush: int = 0) -> None:
    """Write an export of ``n`` tasks in Label Studio's full JSON format (``brush`` masks
    per task)."""
    rng = np.random.default_rng(seed)
    pool = rle_pool(1280, 960, seed) if brush else []
    xy = rng.uniform(0, 70, (n, 5, 2)).round(6).tolist()
    wh = rng.uniform(1, 30, (n, 5, 2)).round(6).tolist()
    with open(path, "w") as f:
        f.write("[")
        for i in range(n):
            res = [{"id": f"r{i}_{k}", "from_name": "bbox", "to_name": "image",
                    "type": "rectanglelabels", "original_width": 1280, "original_height": 960,
                    "image_rotation": 0, "origin": "manual",
                    "value": {"x": xy[i][k][0], "y": xy[i][k][1], "width": wh[i][k][0],
                              "height": wh[i][k][1], "rotation": 0,
                              "rectanglelabels": [LABELS[(i + k) % 3]]}} for k in range(5)]
            res.append({"id": f"t{i}", "from_name": "caption", "to_name": "image",
                        "type": "textarea", "origin": "manual",
                        "value": {"text": [f"caption number {i} with a few words"]}})
            res += brush_results(pool, i, brush, 1280, 960)
            ts = "2026-12-02T09:21:49.251623Z"
            task = {"id": i + 1, "annotations": [{
                "id": i + 1, "completed_by": 1, "result": res, "was_cancelled": False,
                "ground_truth": False, "created_at": ts, "updated_at": ts, "lead_time": 3.2,
                "prediction": {}, "result_count": 0, "task": i + 1, "project": 1}],
                "drafts": [], "predictions": [], "data": {"image": f"/data/upload/1/{i:08x}.jpg"},
                "meta": {}, "created_at": ts, "updated_at": ts, "inner_id": i + 1,
                "total_annotations": 1, "cancelled_annotations": 0, "project": 1}
            if i:
                f.write(",")
            f.write(json.dumps(task))
        f.write("]")


def stdlib_parse(path: Path) -> int:
    """A plain json.load parser building the same columns (samples, boxes, texts)."""
    with open(path) as f:
        tasks = json.load(f)
    task_id: list[int] = []
    width: list[int] = []
    height: list[int] = []
    refs: list[bytes] = []
    datas: list[bytes] = []
    b_sample, b_xywhr, b_label, b_ctrl, b_ann, b_rid = [], [], [], [], [], []
    t_sample, t_text, t_ctrl, t_rid = [], [], [], []
    controls: dict[str, int] = {}
    labels: dict[tuple[int, str], int] = {}
    for task in tasks:
        anns = [a for a in task.get("annotations", []) if not a.get("was_cancelled")]
        gt = [a for a in anns if a.get("ground_truth")]
        pool = gt or anns
        chosen = max(pool, key=lambda a: (a.get("updated_at") or "", a["id"])) if pool else None
        s = len(task_id)
        task_id.append(task["id"])
        refs.append(task["data"]["image"].encode())
        datas.append(json.dumps(task["data"]).encode())
        w = h = 0
        for r in (chosen or {}).get("result", []):
            c = controls.setdefault(r["from_name"], len(controls))
            v = r["value"]
            if not w and "original_width" in r:
                w, h = r["original_width"], r["original_height"]
            if r["type"] == "rectanglelabels":
                b_sample.append(s)
                b_xywhr.append((v["x"], v["y"], v["width"], v["height"], v.get("rotation", 0)))
                b_label.append(labels.setdefault((c, v["rectanglelabels"][0]), len(labels)))
                b_ctrl.append(c)
                b_ann.append(chosen["id"])  # type: ignore[index]
                b_rid.append(r["id"].encode())
            elif r["type"] == "textarea":
                for t in v["text"]:
                    t_sample.append(s)
                    t_text.append(t.encode())
                    t_ctrl.append(c)
                    t_rid.append(r["id"].encode())
        width.append(w)
        height.append(h)
    cols: dict[str, np.ndarray] = {
        "task_id": np.array(task_id, np.int64), "width": np.array(width, np.int32),
        "height": np.array(height, np.int32),
        "boxes.xywhr": np.array(b_xywhr, np.float64).reshape(-1, 5),
        "boxes.label": np.array(b_label, np.int32), "boxes.control": np.array(b_ctrl, np.int16),
        "boxes.annotation": np.array(b_ann, np.int64),
        "boxes.offsets": np.concatenate([[0], np.cumsum(np.bincount(b_sample,
                                                                    minlength=len(task_id)))]),
        "texts.offsets": np.concatenate([[0], np.cumsum(np.bincount(t_sample,
                                                                    minlength=len(task_id)))]),
        "texts.control": np.array(t_ctrl, np.int16),
    }
    for name, vals in (("image_ref", refs), ("data_json", datas), ("boxes.rid", b_rid),
                       ("texts.text", t_text), ("texts.rid", t_rid)):
        cols[f"{name}.bytes"] = np.frombuffer(b"".join(vals), np.uint8)
        cols[f"{name}.offsets"] = np.concatenate([[0], np.cumsum([len(x) for x in vals])])
    return len(cols["task_id"])


def _peak_kib() -> int:
    """Peak resident set of this process in KiB (VmHWM; ru_maxrss if /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(which: str, path: Path, out: Path) -> None:
    if which == "npu_data":
        from npu_data.annotations import parse_export
    elif which == "sdk":
        from label_studio_sdk.converter import Converter
    base = _peak_kib()
    t0 = time.perf_counter()
    if which == "npu_data":
        n = parse_export(path).table.num_samples
    elif which == "stdlib":
        n = stdlib_parse(path)
    else:
        Converter(CONFIG, project_dir=None).convert(str(path), str(out), "JSON_MIN",
                                                    is_dir=False)
        n = -1
    dt = time.perf_counter() - t0
    peak = _peak_kib()
    print(json.dumps({"which": which, "seconds": dt, "samples": n,
                      "peak_mib": (peak - base) / 1024}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--parsers", default="npu_data,stdlib,sdk")
    ap.add_argument("--brush", type=int, default=0, metavar="K",
                    help="brush masks (1280x960) per task (default %(default)s)")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs per parser, taken in turn (the table shows the median)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child, a.file, a.out)
        return 0
    if a.tasks < 1 or a.runs < 1 or a.brush < 0:
        ap.error("--tasks and --runs must be at least 1, --brush at least 0")
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / (f"export-{a.tasks}.json" if not a.brush
                    else f"export-{a.tasks}-brush{a.brush}.json")
    if not path.exists():
        generate(path, a.tasks, brush=a.brush)
    size_mib = path.stat().st_size / 2**20
    env = {**os.environ, "NPU_DATA_QUIET": "1"}
    parsers = a.parsers.split(",")
    runs: dict[str, list[dict]] = {w: [] for w in parsers}
    for _ in range(a.runs):  # in turn, so that a busy spell hits every parser alike
        for which in parsers:
            out = a.out / f"sdk-{which}"
            proc = subprocess.run([sys.executable, "-m", "npu_data.bench.parse", "--child", which,
                                   "--file", str(path), "--out", str(out)],
                                  capture_output=True, text=True, env=env, check=True)
            runs[which].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = []
    for which in parsers:
        secs = [r["seconds"] for r in runs[which]]
        row = {**runs[which][0], "seconds": float(np.median(secs)), "runs": secs,
               "peak_mib": max(r["peak_mib"] for r in runs[which])}
        row["tasks_per_s"] = a.tasks / row["seconds"]
        row["peak_over_file"] = row["peak_mib"] / size_mib
        rows.append(row)
    base = {r["which"]: r["seconds"] for r in rows}.get("stdlib")
    masks = f", {a.brush} brush masks each" if a.brush else ""
    print(f"export: {a.tasks} tasks{masks}, {size_mib:.1f} MiB  (peak = VmHWM after parse - "
          f"after imports; median of {a.runs} run(s))")
    print(f"{'parser':<10} {'seconds':>8} {'tasks/s':>10} {'x stdlib':>8} {'peak MiB':>9} "
          f"{'peak/file':>9}")
    for r in rows:
        speed = f"{base / r['seconds']:8.2f}" if base else f"{'-':>8}"
        print(f"{r['which']:<10} {r['seconds']:8.2f} {r['tasks_per_s']:10.0f} {speed} "
              f"{r['peak_mib']:9.1f} {r['peak_over_file']:9.2f}")
    (a.out / "parse.json").write_text(json.dumps({"tasks": a.tasks, "brush": a.brush,
                                                  "file_mib": size_mib,
                                                  "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
