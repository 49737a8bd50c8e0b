"""The throughput suite behind ``npu-data bench``: interleaved epochs, side by side.

Pipelines (same images, same augmentation, same batch size and worker count):
baseline (torch DataLoader, JPEG files, Pillow decode, per-sample CPU reference transforms),
npu-data from raw shards, npu-data from encoded shards, and a WebDataset tar pipeline
feeding the device transforms when ``npu_data.loaders.wds`` is present. Kornia, DALI and
FFCV are reported as skipped unless installed.
"""

from __future__ import annotations

import functools
import importlib.util
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from benches import baseline
from benches.datasets import BenchData, ensure
from npu_data import device as dev


@dataclass
class BenchConfig:
    """What to run."""

    images: int = 2000
    width: int = 500
    height: int = 375
    crop: int = 224
    batch_size: int = 64
    workers: int = 2
    warmup: int = 1
    epochs: int = 3
    stage_samples: int = 128
    device: str = "auto"
    seed: int = 0

    @classmethod
    def quick(cls, **over: Any) -> BenchConfig:
        """A configuration that finishes in well under a minute (CI smoke run)."""
        base = dict(images=16, width=128, height=96, crop=64, batch_size=8, workers=0,
                    warmup=1, epochs=2, stage_samples=8)
        base.update({k: v for k, v in over.items() if v is not None})
        return cls(**base)  # type: ignore[arg-type]


class _Peak:
    """Peak resident memory of this process and its children, sampled in a thread."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.main, self.workers = period, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                main = me.memory_info().rss
                kids = sum(c.memory_info().rss for c in me.children(recursive=True))
            except psutil.Error:
                continue
            self.main, self.workers = max(self.main, main), max(self.workers, kids)
            self._stop.wait(self.period)

    def __enter__(self) -> _Peak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


@dataclass
class Pipeline:
    """A named loader factory plus its stage probe."""

    name: str
    label: str
    make: Callable[[], Any]
    stages: Callable[[], dict[str, float]]
    worker_stages: tuple[str, ...]


def _count(b: Any) -> int:
    return int((b["image"] if isinstance(b, dict) else b).shape[0])


def _epoch(loader: Any, device: torch.device) -> float:
    t, n = time.perf_counter(), 0
    for b in loader:
        n += _count(b)
    dev.synchronize(device)
    return n / (time.perf_counter() - t)


def _ours_stages(path: Path, cfg: BenchConfig, device: torch.device) -> dict[str, float]:
    from npu_data.loaders import collate_samples
    from npu_data.loaders.dataloader import to_device
    from npu_data.shards.reader import ShardDataset

    ds = ShardDataset(path)
    n = min(len(ds), cfg.stage_samples)
    augment = baseline.augmentation(cfg.crop)
    t = time.perf_counter()
    samples = [ds[i] for i in range(n)]
    read = time.perf_counter() - t
    t = time.perf_counter()
    batches = [collate_samples(samples[a:a + cfg.batch_size], pin=dev.is_accelerator(device))
               for a in range(0, n, cfg.batch_size)]
    coll = time.perf_counter() - t
    t = time.perf_counter()
    moved = [to_device(b, device, non_blocking=True) for b in batches]
    dev.synchronize(device)
    h2d = time.perf_counter() - t
    gen = dev.manual_seed(0, device)
    augment(moved[0], generator=gen)
    dev.synchronize(device)
    t = time.perf_counter()
    for b in moved:
        augment(b, generator=gen)
    dev.synchronize(device)
    aug = time.perf_counter() - t
    k = 1000 / n
    key = "read" if ds.store == "raw" else "decode"  # encoded: ds[i] reads and decodes
    return {key: read * k, "collate": coll * k, "h2d": h2d * k, "augment": aug * k}


def _baseline_stages(files: list[Path], cfg: BenchConfig) -> dict[str, float]:
    import io

    from PIL import Image

    n = min(len(files), cfg.stage_samples)
    t = time.perf_counter()
    blobs = [f.read_bytes() for f in files[:n]]
    read = time.perf_counter() - t
    t = time.perf_counter()
    for b in blobs:
        with Image.open(io.BytesIO(b)) as im:
            im.convert("RGB")
    decode = time.perf_counter() - t
    ds = baseline.JpegReference(files[:n], cfg.crop)
    t = time.perf_counter()
    items = [ds[i] for i in range(n)]
    total = time.perf_counter() - t
    t = time.perf_counter()
    for a in range(0, n, cfg.batch_size):
        torch.stack(items[a:a + cfg.batch_size])
    coll = time.perf_counter() - t
    k = 1000 / n
    return {"read": read * k, "decode": decode * k,
            "augment_cpu": max(0.0, total - read - decode) * k, "collate": coll * k}


def _ours(path: Path, cfg: BenchConfig, device: torch.device) -> Any:
    from npu_data.loaders import DataLoader
    from npu_data.shards.reader import ShardDataset

    return DataLoader(ShardDataset(path), batch_size=cfg.batch_size, shuffle=True,
                      num_workers=cfg.workers, pin_memory=True,
                      persistent_workers=cfg.workers > 0,
                      prefetch_factor=4 if cfg.workers else None, device=device,
                      transform=baseline.augmentation(cfg.crop), seed=cfg.seed)


def pipelines(data: BenchData, cfg: BenchConfig, device: torch.device
              ) -> tuple[list[Pipeline], list[dict[str, Any]]]:
    """The runnable pipelines and the skipped ones (with the reason)."""
    runs = [Pipeline("baseline", "baseline: JPEG + Pillow per sample (CPU)",
                     lambda: baseline.loader(data.files, cfg.batch_size, cfg.workers, cfg.crop),
                     lambda: _baseline_stages(data.files, cfg),
                     ("read", "decode", "augment_cpu", "collate"))]
    skipped: list[dict[str, Any]] = []
    for store, path in (("raw", data.raw), ("encoded", data.encoded)):
        name = f"npu_data_{store}"
        label = f"npu-data, {store} shards, batched on {device.type}"
        if path is None:
            skipped.append({"name": name, "label": label, "reason": data.import_error})
            continue
        runs.append(Pipeline(name, label, functools.partial(_ours, path, cfg, device),
                             functools.partial(_ours_stages, path, cfg, device),
                             ("read", "decode", "collate")))
    skipped.append({"name": "webdataset", "label": "WebDataset tar + device transforms",
                    "reason": "npu_data.loaders.wds not available"
                    if importlib.util.find_spec("npu_data.loaders.wds") is None
                    else "not wired into this suite yet"})
    for mod, label in (("kornia", "Kornia"), ("nvidia.dali", "NVIDIA DALI"), ("ffcv", "FFCV")):
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        skipped.append({"name": mod.split(".")[-1], "label": label,
                        "reason": "installed but not wired into this suite yet" if found
                        else "not installed"})
    return runs, skipped


def _bound(stages: dict[str, float], worker_stages: tuple[str, ...], workers: int) -> str:
    eff = {k: v / workers if workers and k in worker_stages else v for k, v in stages.items()}
    return max(eff, key=lambda k: eff[k]) if eff else ""


def measure(runs: list[Pipeline], cfg: BenchConfig, device: torch.device,
            stages: bool = True) -> list[dict[str, Any]]:
    """Interleaved epochs of every pipeline; one result dict per pipeline."""
    loaders = [p.make() for p in runs]
    rates: list[list[float]] = [[] for _ in runs]
    peaks = [(0, 0)] * len(runs)
    for e in range(cfg.warmup + cfg.epochs):
        for k, (p, loader) in enumerate(zip(runs, loaders, strict=True)):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(e)
            with _Peak() as peak:
                r = _epoch(loader, device if p.name != "baseline" else torch.device("cpu"))
            if e >= cfg.warmup:
                rates[k].append(r)
                peaks[k] = (max(peaks[k][0], peak.main), max(peaks[k][1], peak.workers))
    del loaders
    out: list[dict[str, Any]] = []
    for p, rate, (pm, pw) in zip(runs, rates, peaks, strict=True):
        st = p.stages() if stages else {}
        mib = 1 << 20
        out.append({"name": p.name, "label": p.label, "status": "ok", "epochs_img_s": rate,
                    "median_img_s": statistics.median(rate), "min_img_s": min(rate),
                    "max_img_s": max(rate), "peak_memory_mib": {
                        "main": pm / mib, "workers": pw / mib, "total": (pm + pw) / mib},
                    "stages_ms_per_img": st,
                    "bound_by": _bound(st, p.worker_stages, cfg.workers) if st else None})
    base = next((x for x in out if x["name"] == "baseline"), None)
    for x in out:
        x["ratio_to_baseline"] = x["median_img_s"] / base["median_img_s"] if base else None
    return out


SWEEPS = {"workers": (0, 1, 2), "batch_size": (16, 32, 64), "crop": (128, 224, 320)}


def run(cfg: BenchConfig, data_dir: Path, sweep: bool = False,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Make or reuse the dataset, measure every pipeline, optionally sweep; the results."""
    device = dev.resolve_device(cfg.device)
    data = ensure(data_dir, cfg.images, cfg.width, cfg.height, cfg.seed)
    runs, skipped = pipelines(data, cfg, device)
    log(f"bench: {cfg.images} images {cfg.width}x{cfg.height}, crop {cfg.crop}, batch "
        f"{cfg.batch_size}, {cfg.workers} worker(s), device {dev.describe(device)}; "
        f"{len(runs)} pipelines, {cfg.warmup}+{cfg.epochs} epochs interleaved")
    results = measure(runs, cfg, device)
    for x in results:
        log(f"  {x['label']:<45} {x['median_img_s']:8.1f} img/s "
            f"({x['ratio_to_baseline']:.2f}x), bound by {x['bound_by']}")
    sweeps: dict[str, list[dict[str, Any]]] = {}
    if sweep:
        for key, values in SWEEPS.items():
            rows: list[dict[str, Any]] = []
            for v in values:
                c = BenchConfig(**{**asdict(cfg), key: v, "warmup": 1, "epochs": 1})
                sub = [p for p in pipelines(data, c, device)[0]
                       if p.name in ("baseline", "npu_data_raw")]
                got = measure(sub, c, device, stages=False)
                rows.append({"value": v, "img_s": {x["name"]: x["median_img_s"] for x in got}})
                log(f"  sweep {key}={v}: " + ", ".join(
                    f"{n} {r:.0f}" for n, r in rows[-1]["img_s"].items()))
            sweeps[key] = rows
    return {
        "config": {**asdict(cfg), "device": str(device)},
        "machine": {"cpus": psutil.cpu_count(), "device": dev.describe(device),
                    "torch": torch.__version__, "numpy": np.__version__,
                    "python": platform.python_version(), "platform": platform.platform()},
        "pipelines": results + [{**s, "status": "skipped"} for s in skipped],
        "sweeps": sweeps,
    }
