"""Stage breakdown of a pipeline: each stage timed alone, in one process, ms per image.

A ``StagePlan`` is the pipeline's own work split into steps — the same functions its loader
runs: ``read`` (n sample numbers -> items), per-sample steps (``decode``, ``augment_cpu``),
``collate``, then per-batch steps on the main process (``h2d``, ``augment``). Steps up to and
including collate run in the loader's workers when there are any, so the bound side is
``max(sum(worker stages) / workers, sum(main stages))`` and the bound stage is the costliest
one on that side. Used by ``npu_data.bench.suite`` and ``npu_data.bench.pipeline``.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from npu_data import device as dev
from npu_data.transforms.base import CropParams

if TYPE_CHECKING:
    from npu_data.bench.pillow_baseline import JpegDataset

STAGES = ("read", "decode", "augment_cpu", "collate", "h2d", "augment")
KIND = {"read": "IO", "decode": "compute", "augment_cpu": "compute", "collate": "memory",
        "h2d": "memory", "augment": "compute"}
MAIN = frozenset({"h2d", "augment"})  # run on the main process whatever the worker count

Step = Callable[[Any], Any]


@dataclass
class StagePlan:
    """One pipeline's work, stage by stage (see the module doc)."""

    read: Callable[[int], list[Any]]
    per_sample: list[tuple[str, Step]]
    collate: Callable[[list[Any]], Any]
    per_batch: list[tuple[str, Step]]
    # a pipeline whose stages are not a chain of per-sample steps times itself:
    # timer(n, batch_size, device, repeats) -> ms per image of each stage
    timer: Callable[[int, int, torch.device, int], dict[str, float]] | None = None


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> tuple[Any, float]:
    """``fn()``'s result and its median time over ``repeats`` calls (a busy machine's
    stalls hit single passes)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        dev.synchronize(device)
        times.append(time.perf_counter() - t)
    return out, statistics.median(times)


def _each(step: Step, items: list[Any]) -> list[Any]:
    return [step(x) for x in items]


def time_stages(plan: StagePlan, n: int, batch_size: int, device: torch.device,
                repeats: int = 3) -> dict[str, float]:
    """Milliseconds per image of each stage over ``n`` samples: each step warmed up once,
    then the median of ``repeats`` passes."""
    if plan.timer is not None:
        return plan.timer(n, batch_size, device, repeats)
    seconds: dict[str, float] = {}
    plan.read(n)  # opens files and maps, warms the page cache like the epochs before
    items, seconds["read"] = _timed(lambda: plan.read(n), device, repeats)
    n = len(items)
    for name, step in plan.per_sample:
        step(items[0])
        items, seconds[name] = _timed(functools.partial(_each, step, items), device, repeats)
    groups = [items[a:a + batch_size] for a in range(0, n, batch_size)]
    batches, seconds["collate"] = _timed(functools.partial(_each, plan.collate, groups),
                                         device, repeats)
    for name, step in plan.per_batch:
        step(batches[0])
        dev.synchronize(device)
        batches, seconds[name] = _timed(functools.partial(_each, step, batches), device,
                                        repeats)
    return {k: v * 1000 / n for k, v in seconds.items()}


def bound(stages: dict[str, float], workers: int) -> dict[str, Any]:
    """The bound stage, its kind (IO / memory / compute), and the img/s the stages allow."""
    if not stages:
        return {"bound_by": None, "bound_kind": None, "stage_img_s": None}
    if workers:
        side = {k: v for k, v in stages.items() if k not in MAIN}
        main = {k: v for k, v in stages.items() if k in MAIN}
        worker_ms, main_ms = sum(side.values()) / workers, sum(main.values())
        pick, ms = (side, worker_ms) if worker_ms >= main_ms or not main else (main, main_ms)
    else:
        pick, ms = stages, sum(stages.values())
    name = max(pick, key=lambda k: pick[k])
    return {"bound_by": name, "bound_kind": KIND.get(name, "compute"),
            "stage_img_s": 1000 / ms if ms > 0 else None}


def ceilings(one_thread: dict[str, float], cores: int, host_augment: bool) -> dict[str, Any]:
    """What the machine allows a row at all, from its stages timed on one thread: reading
    only (``read``), decoding only what the crops need (``decode``), the kernels only
    (``augment_cpu`` + ``augment`` when it runs on the host), and their combined cost per
    image spread over ``cores`` (``ceiling_img_s``; collate and the copy are not counted)."""
    read, decode = one_thread.get("read", 0.0), one_thread.get("decode", 0.0)
    kernels = one_thread.get("augment_cpu", 0.0) + (
        one_thread.get("augment", 0.0) if host_augment else 0.0)
    combined = read + decode + kernels
    if not one_thread or combined <= 0:
        return {}
    return {"read_ms": read, "decode_ms": decode, "kernels_ms": kernels,
            "combined_ms": combined, "cores": cores,
            "read_img_s": cores * 1000 / read if read > 0 else None,
            "decode_img_s": cores * 1000 / decode if decode > 0 else None,
            "kernels_img_s": cores * 1000 / kernels if kernels > 0 else None,
            "ceiling_img_s": cores * 1000 / combined}


def _augment_step(crop: int, device: torch.device) -> Step:
    from npu_data.bench.pillow_baseline import augmentation

    augment = augmentation(crop)
    gen = dev.manual_seed(0, device)
    return lambda b: augment(b, generator=gen)


def _kornia_step(crop: int) -> Step:
    from npu_data.bench.extras import kornia_augmentation

    return kornia_augmentation(crop)


def _h2d_step(device: torch.device) -> Step:
    from npu_data.loaders.prefetch import to_device

    return lambda b: to_device(b, device, non_blocking=True)


def baseline_plan(files: list[Path], export: Path, crop: int, device: torch.device) -> StagePlan:
    """The baseline's own read / decode / per-sample augment / collate (+ the copy to
    ``device`` a training loop does)."""
    from npu_data.bench import pillow_baseline as baseline

    return _jpeg_plan(baseline.JpegReference(files, baseline.targets(export, files), crop),
                      device)


def torchvision_plan(files: list[Path], export: Path, crop: int, device: torch.device
                     ) -> StagePlan:
    """torchvision's baseline: open / Pillow decode / v2 transforms per sample / collate."""
    from npu_data.bench import pillow_baseline as baseline
    from npu_data.bench import torchvision_baseline

    return _jpeg_plan(torchvision_baseline.TorchvisionJpeg(
        files, baseline.targets(export, files), crop), device)


def _jpeg_plan(ds: JpegDataset, device: torch.device) -> StagePlan:
    """A ``bench.pillow_baseline.JpegDataset``'s stages, its collate and the copy to ``device``."""
    from npu_data.bench import pillow_baseline as baseline

    return StagePlan(lambda n: [ds.read(i) for i in range(min(n, len(ds)))],
                     [("decode", ds.decode), ("augment_cpu", ds.augment)], baseline.collate,
                     [("h2d", _h2d_step(device))])


def shard_plan(path: Path, crop: int, device: torch.device, kornia: bool = False,
               decode: str = "exact") -> StagePlan:
    """npu-data over shards: ``ds[i]`` (raw: the read; encoded: bytes read, then ``ds[i]``
    decodes), collate in the workers, H2D copy and the batched augmentation on ``device``
    (``kornia``: Kornia's, ``npu_data.bench.extras``)."""
    from npu_data.loaders import collate_samples
    from npu_data.shards.reader import ShardDataset

    ds = ShardDataset(path)
    pin = dev.is_accelerator(device)
    if not kornia and device.type == "cpu":  # the DataLoader crops while reading here
        return StagePlan(lambda n: [], [], list, [],
                         timer=functools.partial(_crop_read_stages, ds, crop,
                                                 decode == "fast"))
    augment = _kornia_step(crop) if kornia else _augment_step(crop, device)
    tail = [("h2d", _h2d_step(device)), ("augment", augment)]
    coll = lambda s: collate_samples(s, pin=pin)  # noqa: E731
    if ds.store == "raw":
        return StagePlan(lambda n: [ds[i] for i in range(min(n, len(ds)))], [], coll, tail)

    def read(n: int) -> list[Any]:
        out = []
        for i in range(min(n, len(ds))):
            k, j = ds.locate(i)
            sh = ds.shard(k)
            off, size = int(sh.index[j]["offset"]), int(sh.index[j]["length"])
            out.append((i, sh.data[off:off + size].tobytes()))
        return out

    return StagePlan(read, [("decode", lambda item: ds[item[0]])], coll, tail)


def dali_plan() -> StagePlan:
    """An empty stage breakdown: DALI's stages run inside its own executor, not apart."""
    return StagePlan(lambda n: [], [], list, [], timer=lambda *_: {})


def _crop_read_stages(ds: Any, crop: int, fast: bool, n: int, batch_size: int,
                      device: torch.device, repeats: int, transform: Any = None,
                      batches: list[Any] | None = None) -> dict[str, float]:
    """The crop-at-read path (``loaders.request``, ``loaders.assemble``), stage by stage: read = the batch's
    columns (JPEGs left encoded), decode = the crop boxes' JPEG regions, augment_cpu = the
    crop into the batch buffer (all three in the workers), collate = the rest of the
    worker's batch (annotations, geometry, shared buffer); augment = the pipeline after the
    crop (``transform``, default the bench's RandomResizedCrop + ColorJitter + flip), over
    ``batches`` of sample indices (default: the first ``n`` in batches of ``batch_size``)."""
    import numpy as np

    from npu_data.batch import BatchRequest
    from npu_data.bench.pillow_baseline import augmentation
    from npu_data.loaders import collate_samples
    from npu_data.readers import read_crop
    from npu_data.shards.batch_read import read_columns, requested
    from npu_data.transforms import ReadCrop, draws
    from npu_data.transforms.compose import split
    from npu_data.transforms.pipeline import read_regions

    aug = transform if transform is not None else augmentation(crop)
    leading = ReadCrop.of(aug, fast)
    assert leading is not None
    lead = split(aug)
    assert lead is not None
    rest = lead.rest
    ids: np.ndarray = np.arange(min(n, len(ds)))
    groups = [ids[a:a + batch_size] for a in range(0, len(ids), batch_size)]
    if batches is not None:  # e.g. a BucketBatchSampler's: one bucket each
        groups = [np.asarray(b, dtype=np.int64) for b in batches]
        ids = np.concatenate(groups) if groups else ids[:0]
    sizes = ds.sizes()
    keys = [draws.sample_keys(0, 0, g) for g in groups]
    drawn = [leading.draw_plan(sizes[g], g) for g in groups]
    plans = [BatchRequest(tuple(g.tolist()), g, params={k: v.numpy() for k, v in d[0].items()}, crop=d[1])
             for g, d in zip(groups, drawn, strict=True)]
    out = [torch.empty((len(g), 3, *d[1].size), dtype=torch.uint8) for g, d in zip(
        groups, drawn, strict=True)]

    def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
        fn()
        return _timed(fn, device, repeats)

    cols, t_read = timed(lambda: [read_columns(ds, g.tolist(), lazy_jpeg=True) for g in groups])
    boxes = [torch.from_numpy(d[1].boxes) for d in drawn]
    decoded, t_decode = timed(lambda: [read_crop.decode_boxes(
        c.images, b, leading.size if fast else None,
        regions=None if fast else read_regions(d[1]))
        for c, b, d in zip(cols, boxes, drawn, strict=True)])

    def crops() -> None:  # as the reader (readers.read_crop.read): windows too
        for (im, b), o, d in zip(decoded, out, drawn, strict=True):
            read_crop.resize_into(im, b, o, d[1].windows, d[1].interpolation)

    _, t_crop = timed(crops)
    batches, t_all = timed(lambda: [collate_samples(requested(ds, p)) for p in plans])
    params = [aug.draw_keyed(sizes[g], k) for g, k in zip(groups, keys, strict=True)]
    moved, t_h2d = timed(lambda: [_h2d_step(device)(b) for b in batches])
    _, t_aug = timed(lambda: [rest.apply(b, p) for b, p in zip(moved, params, strict=True)])
    ms = 1000 / max(len(ids), 1)
    encoded = any(not isinstance(im, np.ndarray) for c in cols for im in c.images)
    out_ms = {"read": t_read * ms, "decode": t_decode * ms if encoded else None,
              "augment_cpu": t_crop * ms,
              "collate": max(t_all - t_read - t_decode - t_crop, 0.0) * ms,
              "h2d": t_h2d * ms, "augment": t_aug * ms}
    return {k: v for k, v in out_ms.items() if v is not None}


def keyed_stages(ds: Any, transform: Any, n: int, batch_size: int, device: torch.device,
                 repeats: int = 3, batches: list[Any] | None = None) -> dict[str, float]:
    """ms per image of each stage of a keyed ``transform`` that starts with a crop over the
    ``ShardDataset`` ``ds``, read as the DataLoader reads it (crop at read); ``batches``: the
    sample indices of each batch (default the first ``n`` in batches of ``batch_size``)."""
    return _crop_read_stages(ds, 0, False, n, batch_size, device, repeats, transform, batches)


def wds_plan(tars: list[Path], crop: int, device: torch.device,
             decode: str = "exact") -> StagePlan:
    """WebDataset tars: tar members read, decoded into sample dicts, then as ``shard_plan``
    (on the CPU the DataLoader crops while reading: ``_wds_crop_read_stages``)."""
    from npu_data.formats.webdataset.reader import iter_tar_samples
    from npu_data.formats.webdataset.stages import decode as decode_sample
    from npu_data.loaders import collate_samples

    def read(n: int) -> list[Any]:
        members = itertools.chain.from_iterable(iter_tar_samples(str(t)) for t in tars)
        return list(itertools.islice(members, n))

    if device.type == "cpu":
        return StagePlan(lambda n: [], [], list, [],
                         timer=functools.partial(_wds_crop_read_stages, read, crop,
                                                 decode == "fast"))
    pin = dev.is_accelerator(device)
    return StagePlan(read, [("decode", decode_sample)],
                     lambda s: collate_samples(s, pin=pin),
                     [("h2d", _h2d_step(device)), ("augment", _augment_step(crop, device))])


def _wds_crop_read_stages(read: Callable[[int], list[Any]], crop: int, fast: bool, n: int,
                          batch_size: int, device: torch.device,
                          repeats: int) -> dict[str, float]:
    """The crop-at-read path of a stream (``loaders.assemble``), stage by stage: read =
    the tar members, decode = the crop boxes' JPEG regions, augment_cpu = the crop into the
    batch buffer, collate = the rest of the worker's work (JPEG headers, annotations into
    sample dicts, geometry, boxes drawn); augment = the pipeline after the crop on the main
    process."""
    from npu_data.bench.pillow_baseline import augmentation
    from npu_data.formats.webdataset.stages import planned as planned_sample
    from npu_data.loaders import assemble
    from npu_data.loaders.request import CropState
    from npu_data.readers import read_crop
    from npu_data.transforms import ReadCrop, draws
    from npu_data.transforms.compose import split
    from npu_data.transforms.pipeline import Pipeline

    aug = augmentation(crop)
    plan = ReadCrop.of(aug, fast)
    assert plan is not None
    lead = split(aug)
    assert lead is not None
    rest = lead.rest
    state = CropState()
    state.arm(Pipeline(aug), 0, 0, fast)

    def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
        fn()
        return _timed(fn, device, repeats)

    members, t_read = timed(lambda: read(n))
    groups = [members[a:a + batch_size] for a in range(0, len(members), batch_size)]

    def batches() -> list[Any]:
        return [assemble.collate_host([planned_sample(m, plan) for m in g], stream=state)
                for g in groups]

    cropped, t_all = timed(batches)
    samples = [[planned_sample(m, plan) for m in g] for g in groups]
    images = [[s["image"] for s in g] for g in samples]
    sizes = [b.stored_sizes for b in cropped]
    keys = [draws.sample_keys(0, 0, b.fields["index"].numpy()) for b in cropped]
    boxes = [CropParams.of(plan.crop.draw_keyed(sz, k, plan.position)).boxes
             for sz, k in zip(sizes, keys, strict=True)]
    size = plan.size
    assert size is not None  # the bench's crop has a fixed size
    decoded, t_decode = timed(lambda: [read_crop.decode_boxes(im, b, size if fast else None)
                                       for im, b in zip(images, boxes, strict=True)])
    out = [torch.empty((len(g), 3, *size), dtype=torch.uint8) for g in groups]

    def crops() -> None:
        for (im, b), o in zip(decoded, out, strict=True):
            read_crop.resize_into(im, b, o)

    _, t_crop = timed(crops)
    params = [aug.draw_keyed(sz, k) for sz, k in zip(sizes, keys, strict=True)]
    moved, t_h2d = timed(lambda: [_h2d_step(device)(b.as_dict()) for b in cropped])
    _, t_aug = timed(lambda: [rest.apply(b, p) for b, p in zip(moved, params, strict=True)])
    ms = 1000 / max(len(members), 1)
    return {"read": t_read * ms, "decode": t_decode * ms, "augment_cpu": t_crop * ms,
            "collate": max(t_all - t_decode - t_crop, 0.0) * ms,
            "h2d": t_h2d * ms, "augment": t_aug * ms}
