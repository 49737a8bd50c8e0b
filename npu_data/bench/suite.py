"""The throughput suite behind ``npu-data bench``: interleaved epochs, side by side.

Pipelines (same images, same augmentation, boxes carried along, same batch size and worker
count): the baseline, torchvision's v2 transforms on PIL images in a torch DataLoader
(``npu_data.bench.torchvision_baseline``; when torchvision is missing the next row stands in), the
per-sample Pillow reference (torch DataLoader, JPEG files, Pillow decode, each transform's CPU
reference moving the boxes, ``npu_data.bench.pillow_baseline``), npu-data from raw shards, npu-data from encoded shards, and
WebDataset tars (``npu-data export-wds`` of the same JPEGs) streamed by
``npu_data.formats.webdataset.WebDatasetStream`` into our DataLoader and device transforms; Kornia's
augmentation on our raw-shard batches when Kornia is installed, and NVIDIA DALI's CPU pipeline
on the JPEG files when DALI is (``npu_data.bench.extras``; no boxes, no stage breakdown). FFCV is
listed, "not installed" unless importable.
"""

from __future__ import annotations

import functools
import platform
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from npu_data import device as dev
from npu_data.bench import extras, torchvision_baseline
from npu_data.bench import pillow_baseline as baseline
from npu_data.bench import stage_times as stages
from npu_data.bench.bench_data import BenchData, ensure
from npu_data.formats.webdataset.stream import WebDatasetStream
from npu_data.loaders import placement


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
    threads: int | None = None  # torch intra-op threads of the main process (None: torch's)
    decode: str = "exact"  # npu-data's JPEG decoding (DataLoader(decode=...))

    @classmethod
    def quick(cls, **over: Any) -> BenchConfig:
        """A configuration that finishes in well under a minute (CI smoke run)."""
        base = dict(images=16, width=128, height=96, crop=64, batch_size=8, workers=0,
                    warmup=1, epochs=2, stage_samples=8)
        base.update({k: v for k, v in over.items() if v is not None})
        return cls(**base)  # type: ignore[arg-type]


def _anon(proc: psutil.Process) -> int:
    """Anonymous resident bytes (heap, buffers: what a leak grows; not the file pages of
    memory-mapped shards), from /proc; the whole resident set where /proc has no RssAnon."""
    try:
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(proc.memory_info().rss)


class _Peak:
    """Peak resident memory of this process and of its children not in ``exclude``, whole
    (``main``, ``workers``) and anonymous (``main_anon``, ``workers_anon``)."""

    def __init__(self, exclude: set[int], period: float = 0.05) -> None:
        self.exclude, self.period, self.main, self.workers = exclude, period, 0, 0
        self.main_anon, self.workers_anon = 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                kids = [c for c in me.children(recursive=True) if c.pid not in self.exclude]
                main, main_anon = me.memory_info().rss, _anon(me)
                rss = sum(c.memory_info().rss for c in kids)
                anon = sum(_anon(c) for c in kids)
            except psutil.Error:
                continue
            self.main, self.workers = max(self.main, main), max(self.workers, rss)
            self.main_anon = max(self.main_anon, main_anon)
            self.workers_anon = max(self.workers_anon, anon)
            self._stop.wait(self.period)

    def __enter__(self) -> _Peak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _children() -> set[int]:
    try:
        return {c.pid for c in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


@dataclass
class Pipeline:
    """A named loader factory plus its stage plan."""

    name: str
    label: str
    make: Callable[[], Any]
    plan: Callable[[], stages.StagePlan]
    move: bool = False  # batches arrive on the host: copy them to the device in the loop
    timed: bool = True  # time its stages (an in-process twin shares its sibling's stages)


def _epoch(loader: Any, device: torch.device, move: bool) -> tuple[float, float]:
    """(img/s, bytes per image of the host batches handed to the device)."""
    from npu_data.loaders.prefetch import tensor_bytes, to_device

    t, n, moved = time.perf_counter(), 0, 0
    before = getattr(loader, "host_bytes", 0)
    for b in loader:
        if move:
            moved += tensor_bytes(b)
            b = to_device(b, device, non_blocking=True)
        n += int(b["image"].shape[0])
    dev.synchronize(device)
    rate = n / (time.perf_counter() - t)
    if not move:
        moved = getattr(loader, "host_bytes", 0) - before
    return rate, moved / max(n, 1)


def _ours(dataset: Any, cfg: BenchConfig, device: torch.device, shuffle: bool = True,
          transform: Any = None, workers: int | None = None) -> Any:
    from npu_data.loaders import DataLoader

    workers = cfg.workers if workers is None else workers
    return DataLoader(dataset, batch_size=cfg.batch_size, shuffle=shuffle,
                      num_workers=workers, pin_memory=True,
                      persistent_workers=workers > 0,
                      prefetch_factor=4 if workers else None, device=device,
                      transform=transform or baseline.augmentation(cfg.crop), seed=cfg.seed,
                      decode=cfg.decode)


def _shards(path: Path, cfg: BenchConfig, device: torch.device, kornia: bool = False,
            workers: int | None = None) -> Any:
    from npu_data.shards.reader import ShardDataset

    aug = extras.kornia_augmentation(cfg.crop) if kornia else None
    return _ours(ShardDataset(path), cfg, device, transform=aug, workers=workers)


def _wds(tars: list[Path], cfg: BenchConfig, device: torch.device,
         workers: int | None = None) -> Any:
    """Shuffled like a WebDataset job: tar order per worker, then a one-batch sample window."""
    stream = WebDatasetStream([str(t) for t in tars], shuffle=True, seed=cfg.seed,
                              buffer=cfg.batch_size)
    return _ours(stream, cfg, device, shuffle=False, workers=workers)


def _in_process(p: Pipeline, cfg: BenchConfig) -> Pipeline | None:
    """``p`` run in the training process (``num_workers=0``: the DataLoader's default, reading
    on one background thread, ``loaders.prefetch.read_ahead``) when ``p`` uses workers."""
    if not cfg.workers:
        return None
    make = p.make
    assert isinstance(make, functools.partial)
    return Pipeline(f"{p.name}_in_process",
                    f"{p.label}, in-process (num_workers=0, read thread)",
                    functools.partial(make.func, *make.args, **{**make.keywords, "workers": 0}),
                    p.plan, timed=False)


def pipelines(data: BenchData, cfg: BenchConfig, device: torch.device
              ) -> tuple[list[Pipeline], list[dict[str, Any]]]:
    """The runnable pipelines and the skipped ones (with the reason)."""
    accel = dev.is_accelerator(device)
    reference = Pipeline("pillow_reference", "per-sample Pillow reference (CPU)",
                         lambda: baseline.loader(data.files, cfg.batch_size, cfg.workers,
                                                 cfg.crop, data.export, pin_memory=accel),
                         lambda: stages.baseline_plan(data.files, data.export, cfg.crop,
                                                      device),
                         move=True)
    skipped: list[dict[str, Any]] = []
    why = torchvision_baseline.unavailable()
    if why is None:  # the baseline: what users run
        runs = [Pipeline("baseline", torchvision_baseline.LABEL,
                         lambda: torchvision_baseline.loader(data.files, cfg.batch_size,
                                                             cfg.workers, cfg.crop, data.export,
                                                             pin_memory=accel),
                         lambda: stages.torchvision_plan(data.files, data.export, cfg.crop,
                                                         device),
                         move=True), reference]
    else:  # the per-sample Pillow reference stands in (same Pillow semantics)
        reference.name, reference.label = "baseline", f"baseline: {reference.label}"
        runs = [reference]
        skipped.append({"name": "torchvision", "label": torchvision_baseline.LABEL,
                        "reason": why})
    for store, path in (("raw", data.raw), ("encoded", data.encoded)):
        name = f"npu_data_{store}"
        label = f"npu-data, {store} shards, batched on {device.type}"
        if path is None:
            skipped.append({"name": name, "label": label, "reason": data.import_error})
            continue
        runs.append(Pipeline(name, label, functools.partial(_shards, path, cfg, device),
                             functools.partial(stages.shard_plan, path, cfg.crop, device,
                                               decode=cfg.decode)))
        runs += [x for x in [_in_process(runs[-1], cfg)] if x is not None]
    label = f"WebDataset tars, batched on {device.type}"
    if data.tars:
        runs.append(Pipeline("webdataset", label, functools.partial(_wds, data.tars, cfg, device),
                             functools.partial(stages.wds_plan, data.tars, cfg.crop, device,
                                               decode=cfg.decode)))
        runs += [x for x in [_in_process(runs[-1], cfg)] if x is not None]
    else:
        skipped.append({"name": "webdataset", "label": label, "reason": data.wds_error})
    for x in extras.status():
        if x["reason"] is None and x["name"] == "dali":  # its own reader on the JPEG files
            runs.append(Pipeline("dali", extras.dali_label(cfg.workers), functools.partial(
                extras.dali_loader, data.files, cfg.batch_size, cfg.workers, cfg.crop,
                cfg.seed), stages.dali_plan, move=True))
        elif x["reason"] is None and data.raw is not None:  # Kornia: on our raw-shard batches
            label = f"Kornia augmentation on raw-shard batches, on {device.type}"
            runs.append(Pipeline(x["name"], label,
                                 functools.partial(_shards, data.raw, cfg, device, True),
                                 functools.partial(stages.shard_plan, data.raw, cfg.crop,
                                                   device, kornia=True)))
        else:
            reason = x["reason"] or f"needs the raw shards ({data.import_error})"
            skipped.append({"name": x["name"], "label": x["label"], "reason": reason})
    return runs, skipped


def measure(runs: list[Pipeline], cfg: BenchConfig, device: torch.device,
            with_stages: bool = True) -> list[dict[str, Any]]:
    """Interleaved epochs of every pipeline; one result dict per pipeline."""
    loaders = [p.make() for p in runs]
    rates: list[list[float]] = [[] for _ in runs]
    moved: list[float] = [0.0] * len(runs)
    peaks = [(0, 0)] * len(runs)
    per_epoch: list[list[tuple[int, int]]] = [[] for _ in runs]  # anonymous (main, workers)
    owned: list[set[int]] = [set() for _ in runs]  # each loader's (persistent) worker pids
    for e in range(cfg.warmup + cfg.epochs):
        for k, (p, loader) in enumerate(zip(runs, loaders, strict=True)):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(e)
            others = set().union(*(o for j, o in enumerate(owned) if j != k))
            before = _children()
            with _Peak(others) as peak:
                r, moved[k] = _epoch(loader, device, p.move)
            owned[k] |= _children() - before - others
            if e >= cfg.warmup:
                rates[k].append(r)
                peaks[k] = (max(peaks[k][0], peak.main), max(peaks[k][1], peak.workers))
                per_epoch[k].append((peak.main_anon, peak.workers_anon))
    del loaders
    out: list[dict[str, Any]] = []
    mib = 1 << 20
    for p, rate, (pm, pw), nbytes, epochs in zip(runs, rates, peaks, moved, per_epoch,
                                                 strict=True):
        n = min(cfg.stage_samples, cfg.images)
        timed = with_stages and p.timed
        st = stages.time_stages(p.plan(), n, cfg.batch_size, device) if timed else {}
        roof = stages.ceilings(_one_thread(p, n, cfg, device, st), placement.cores(),
                               device.type == "cpu") if timed else {}
        median = statistics.median(rate)
        out.append({"name": p.name, "label": p.label, "status": "ok", "epochs_img_s": rate,
                    "median_img_s": statistics.median(rate), "min_img_s": min(rate),
                    "max_img_s": max(rate), "host_to_device_kib_per_img": nbytes / 1024,
                    "peak_memory_mib": {
                        "main": pm / mib, "workers": pw / mib, "total": (pm + pw) / mib},
                    "peak_anon_mib_epochs": [[m / mib, w / mib] for m, w in epochs],
                    "stages_ms_per_img": st, **stages.bound(st, cfg.workers),
                    "ceilings": roof, "pct_of_ceiling": 100 * median / roof["ceiling_img_s"]
                    if roof else None})
    base = next((x for x in out if x["name"] == "baseline"), None)
    for x in out:
        x["ratio_to_baseline"] = x["median_img_s"] / base["median_img_s"] if base else None
    return out


def _one_thread(p: Pipeline, n: int, cfg: BenchConfig, device: torch.device,
                st: dict[str, float]) -> dict[str, float]:
    """``p``'s stages timed on one torch thread (``st`` when that is what ran): the cost
    per image on one core, which the ceilings spread over the cores."""
    threads = torch.get_num_threads()
    if threads == 1:
        return st
    torch.set_num_threads(1)
    try:
        return stages.time_stages(p.plan(), n, cfg.batch_size, device)
    finally:
        torch.set_num_threads(threads)


def ceiling_line(x: Mapping[str, Any]) -> str:
    """A row's ceilings as one line: per-image costs on one core and img/s over the cores."""
    c = x.get("ceilings") or {}
    if not c:
        return ""
    return (f"ceilings over {c['cores']} core(s): read {c['read_ms']:.2f} + decode "
            f"{c['decode_ms']:.2f} + kernels {c['kernels_ms']:.2f} ms/img -> "
            f"{c['ceiling_img_s']:.0f} img/s; row at {x['pct_of_ceiling']:.0f}%")


SWEEP_PIPELINES = ("baseline", "npu_data_raw", "webdataset")


IMAGE_SWEEP_MAX = 512  # images per dataset in the image-size sweep (one dataset per size)
Value = int | str


def default_sweeps(quick: bool = False) -> dict[str, tuple[Value, ...]]:
    """Values swept: workers 0, 1, 2, 4, ... up to the CPU count; batch size; crop (output)
    size; input image size ("WxH", a generated dataset each)."""
    if quick:
        return {"workers": (0, 1), "batch_size": (4, 8), "crop": (32, 64),
                "image": ("64x48", "128x96")}
    cpus = max(2, psutil.cpu_count() or 1)
    workers = (0, 1, *(w for w in (2, 4, 8, 16, 32) if w <= cpus))
    return {"workers": workers, "batch_size": (16, 32, 64, 128), "crop": (128, 224, 320),
            "image": ("250x188", "500x375", "750x563")}


def _swept(data: BenchData, cfg: BenchConfig, key: str, v: Value
           ) -> tuple[BenchData, BenchConfig]:
    over: dict[str, Any] = {"warmup": 1, "epochs": min(2, cfg.epochs)}
    if key != "image":
        return data, BenchConfig(**{**asdict(cfg), **over, key: v})
    try:
        w, h = (int(x) for x in str(v).split("x"))
    except ValueError:
        raise ValueError(f"image size sweep value {v!r}: expected WxH, e.g. 500x375") from None
    n = min(cfg.images, IMAGE_SWEEP_MAX)
    c = BenchConfig(**{**asdict(cfg), **over, "width": w, "height": h, "images": n})
    return ensure(data.root.parent, n, w, h, cfg.seed), c


def sweep(data: BenchData, cfg: BenchConfig, device: torch.device,
          values: Mapping[str, Sequence[Value]], log: Callable[[str], None] = print
          ) -> dict[str, list[dict[str, Any]]]:
    """Throughput of SWEEP_PIPELINES at each value of each swept setting (others fixed)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for key, vals in values.items():
        rows: list[dict[str, Any]] = []
        for v in vals:
            d, c = _swept(data, cfg, key, v)
            sub = [p for p in pipelines(d, c, device)[0] if p.name in SWEEP_PIPELINES]
            got = measure(sub, c, device, with_stages=False)
            rows.append({"value": v, "images": c.images,
                         "img_s": {x["name"]: x["median_img_s"] for x in got}})
            log(f"  sweep {key}={v}: " + ", ".join(
                f"{n} {r:.0f}" for n, r in rows[-1]["img_s"].items()))
        out[key] = rows
    return out


def run(cfg: BenchConfig, data_dir: Path, sweeps: Mapping[str, Sequence[Value]] | None = None,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Make or reuse the dataset, measure every pipeline, optionally sweep; the results."""
    device = dev.resolve_device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    data = ensure(data_dir, cfg.images, cfg.width, cfg.height, cfg.seed)
    runs, skipped = pipelines(data, cfg, device)
    log(f"bench: {cfg.images} images {cfg.width}x{cfg.height}, crop {cfg.crop}, batch "
        f"{cfg.batch_size}, {cfg.workers} worker(s), decode {cfg.decode}, device "
        f"{dev.describe(device)}; "
        f"{len(runs)} pipelines, {cfg.warmup}+{cfg.epochs} epochs interleaved")
    results = measure(runs, cfg, device)
    for x in results:
        log(f"  {x['label']:<45} {x['median_img_s']:8.1f} img/s "
            f"({x['ratio_to_baseline']:.2f}x), bound by {x['bound_by']} ({x['bound_kind']})")
        if x.get("ceilings"):
            log(f"  {'':<45} {ceiling_line(x)}")
    return {
        "config": {**asdict(cfg), "device": str(device)},
        "machine": {"cpus": psutil.cpu_count(), "device": dev.describe(device),
                    "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "numpy": np.__version__,
                    "python": platform.python_version(), "platform": platform.platform()},
        "pipelines": results + [{**s, "status": "skipped"} for s in skipped],
        "sweeps": sweep(data, cfg, device, sweeps, log) if sweeps else {},
        "sweep_pipelines": list(SWEEP_PIPELINES) if sweeps else [],
    }
