"""The AIGC row: mixed-aspect photos (1,600 x 1,200-class) to SDXL's 1024-px buckets, ours
against the same pipeline built from torchvision's PIL transforms per sample.

    python -m npu_data.bench.aigc_buckets [--images 256] [--batch-size 8] [--workers 2] [--epochs 3]
                                   [--device auto] [--scale 1.0] [--store encoded|raw]
                                   [--no-dali]
    python -m npu_data.bench.aigc_buckets --quick      # tiny sizes: checks that it runs and agrees

Both loaders take the same ``BucketBatchSampler`` batches (one bucket each, SDXL's list
scaled by ``--scale``) and the same per-sample parameters (drawn keyed by (seed, epoch,
sample), ``transforms.draws``):

ours:     DataLoader over shards (``--store``; crop at read: only the rows the window needs)
          + Compose([ResizeCrop(None, crop="random"), RandomHorizontalFlip(),
          Normalize(0.5, 0.5, bfloat16)]) on whole batches on ``--device``
baseline: torch DataLoader over the JPEG files, Pillow decode, torchvision
          ``v2.functional.resize`` to the covering size, ``crop``, ``horizontal_flip``,
          ``pil_to_tensor``, ``normalize`` per sample (plain Pillow ``resize``/``crop`` — the
          calls torchvision's PIL kernels make — when torchvision does not import), stacked,
          then moved to ``--device``
dali:     NVIDIA DALI's CPU pipeline over the JPEG files with the same parameters, when
          installed (``npu_data.bench.aigc_dali``; ``--no-dali`` leaves it out)

The first batch of the first pass is compared pixel for pixel (0 levels: both are Pillow's
resize then crop). Passes are interleaved (one warm-up each); the medians are printed, then
the row's ceilings (:func:`ceilings`) and ours as a percentage of the combined one. The
images are generated once under ``--work-dir`` and reused.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from npu_data.bench import torchvision_baseline

# stored (height, width) of the photos: 4:3 and 3:4, 16:9 and 9:16, square, 2:3 (1,600 x
# 1,200-class: 1.9-2.1 megapixels)
ASPECTS = ((1200, 1600), (1600, 1200), (1080, 1920), (1920, 1080), (1440, 1440), (1152, 1728))


def make_photos(root: Path, n: int, scale: float, seed: int = 0) -> Path:
    """``n`` textured JPEGs cycling through ``ASPECTS`` (scaled) with a one-caption export;
    reused when ``root`` already has them."""
    from npu_data.tools.sample_data import texture

    export = root / "export.json"
    want = {"n": n, "scale": scale, "seed": seed, "version": 1}
    stamp = root / "stamp.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == want and export.is_file():
        return export
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tasks = []
    for i in range(n):
        h, w = (max(8, round(v * scale)) for v in ASPECTS[i % len(ASPECTS)])
        img, warm = texture(rng, w, h)
        name = f"images/photo_{i:06d}.jpg"
        Image.fromarray(img).save(root / name, quality=90)
        caption = f"a {'warm' if warm else 'cool'} textured photo {w}x{h}"
        result = [{"id": f"c{i}", "from_name": "caption", "to_name": "image", "type": "textarea",
                   "value": {"text": [caption]}}]
        tasks.append({"id": i + 1, "data": {"image": name},
                      "annotations": [{"id": i + 1, "result": result}]})
    export.write_text(json.dumps(tasks))
    (root / "labeling_config.xml").write_text(
        '<View><Image name="image" value="$image"/>'
        '<TextArea name="caption" toName="image"/></View>')
    stamp.write_text(json.dumps(want))
    return export


def pipeline(buckets: Any) -> Any:
    from npu_data.transforms import Compose, Normalize, RandomHorizontalFlip, ResizeCrop

    return Compose([ResizeCrop(None, crop="random", buckets=buckets), RandomHorizontalFlip(),
                    Normalize(0.5, 0.5, dtype=torch.bfloat16)])


def sample_params(pipe: Any, sizes: np.ndarray, seed: int, i: int) -> dict[str, int]:
    """Sample ``i``'s covering size, window and flip as our loader draws them (keyed by
    (seed, epoch 0, sample)): what the per-sample pipelines are given to do the same work."""
    from npu_data.transforms.draws import sample_keys

    p = pipe.draw_keyed(sizes[i:i + 1], sample_keys(seed, 0, [i]))
    top, left, nh, nw = (int(v) for v in p["0.windows"][0])
    th, tw = (int(v) for v in p["0.out"][0])
    return {"nh": nh, "nw": nw, "top": top, "left": left, "th": th, "tw": tw,
            "flip": int(bool(p["1.flip"][0]))}


class PerSample(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """One JPEG through Pillow and torchvision's PIL transforms with the parameters our
    loader draws for that sample (so both pipelines do the same work on the same pixels)."""

    def __init__(self, files: list[Path], sizes: np.ndarray, pipe: Any, seed: int) -> None:
        self.files, self.sizes, self.pipe, self.seed = files, sizes, pipe, seed
        self.tv = torchvision_baseline.unavailable() is None

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        p = sample_params(self.pipe, self.sizes, self.seed, i)
        top, left, nh, nw, th, tw = (p[k] for k in ("top", "left", "nh", "nw", "th", "tw"))
        with Image.open(self.files[i]) as im:
            img = im.convert("RGB")
        if self.tv:
            from torchvision.transforms.v2 import functional as TF

            img = TF.resize(img, [nh, nw], antialias=True)
            img = TF.crop(img, top, left, th, tw)
            if p["flip"]:
                img = TF.horizontal_flip(img)
            x = TF.pil_to_tensor(img).to(torch.float32).div_(255)
            return TF.normalize(x, [0.5] * 3, [0.5] * 3).to(torch.bfloat16)
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)  # what torchvision's PIL
        img = img.crop((left, top, left + tw, top + th))  # kernels call
        if p["flip"]:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).to(torch.float32) / 255
        return ((x - 0.5) / 0.5).to(torch.bfloat16)


def loaders(args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], Any]:
    """The row's loaders by name (``ours``, ``baseline``, and ``dali`` when asked for and
    installed) over the same batches, and their sampler."""
    from npu_data.bench import aigc_dali
    from npu_data.buckets import bucket_list
    from npu_data.loaders import BucketBatchSampler, DataLoader
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset

    export = make_photos(work / "photos", args.images, args.scale)
    shards = work / f"shards_{args.store}"
    if not (shards / "manifest.json").is_file():
        write_dataset(export, shards, WriteOptions(store=args.store,
                                                   images=image_options(export)))
    ds = ShardDataset(shards)
    buckets = bucket_list("sdxl", size=max(64, round(1024 * args.scale)),
                          step=64 if args.scale >= 0.25 else 8)
    sampler = BucketBatchSampler(ds, args.batch_size, buckets, num_replicas=1, rank=0, seed=0)
    pipe = pipeline(buckets)
    out: dict[str, Any] = {"ours": DataLoader(
        ds, batch_sampler=sampler, num_workers=args.workers, pin_memory=True,
        persistent_workers=args.workers > 0, device=args.device, transform=pipe, seed=0)}
    files = [export.parent / t["data"]["image"] for t in json.loads(export.read_text())]
    out["baseline"] = torch.utils.data.DataLoader(
        PerSample(files, ds.sizes(), pipe, 0), batch_sampler=sampler,
        num_workers=args.workers, persistent_workers=args.workers > 0, collate_fn=torch.stack,
        pin_memory=torch.cuda.is_available())
    if args.dali and aigc_dali.available():
        params = [sample_params(pipe, ds.sizes(), 0, i) for i in range(len(files))]
        out["dali"] = aigc_dali.loader([list(b) for b in sampler], files, params, args.workers)
    return out, sampler


def ceilings(loader: Any, sampler: Any, device: torch.device) -> dict[str, Any]:
    """The row's ceilings (``stages.ceilings``): ours' stages over the sampler's first
    batches (up to 64 images) timed on one thread — the columns read, the windows' JPEG
    regions decoded, the crop, flip and Normalize on the host — over the cores."""
    from npu_data.bench import stage_times as stages
    from npu_data.loaders.placement import cores

    batches, taken = [], 0
    for b in sampler:
        if taken >= 64:
            break
        batches.append(list(b))
        taken += len(batches[-1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        st = stages.keyed_stages(loader.dataset, loader.transform, taken, 1, device, 2,
                                 batches)
    finally:
        torch.set_num_threads(threads)
    return stages.ceilings(st, cores(), device.type == "cpu")


def images_of(batch: Any) -> torch.Tensor:
    """A batch's images: ours and DALI's are dicts, the baseline's a stacked tensor."""
    return batch["image"] if isinstance(batch, dict) else batch


def one_pass(loader: Any, device: torch.device, ours: bool) -> tuple[float, int]:
    n, t0 = 0, time.perf_counter()
    for batch in loader:
        image = images_of(batch)
        if not ours:
            image = image.to(device, non_blocking=True)
        n += image.shape[0]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return n / (time.perf_counter() - t0), n


def main(argv: list[str] | None = None) -> int:
    from npu_data import device as dev

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--scale", type=float, default=1.0, help="photo and bucket size factor")
    ap.add_argument("--store", choices=("encoded", "raw"), default="encoded")
    ap.add_argument("--no-dali", dest="dali", action="store_false",
                    help="leave NVIDIA DALI's CPU pipeline out even when it is installed")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a check that it runs")
    ap.add_argument("--work-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "npu-data-bench-aigc")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.scale, args.epochs, args.workers = 12, 0.05, 1, 0
        args.batch_size = min(args.batch_size, 3)
    device = dev.resolve_device(args.device)
    args.device = str(device)
    work = args.work_dir / f"n{args.images}_s{args.scale:g}"
    named, sampler = loaders(args, work)
    first = {k: images_of(next(iter(v))).to("cpu").float() for k, v in named.items()}
    diff = (first["ours"] - first["baseline"]).abs().max().item() * 127.5
    tv = "torchvision v2" if torchvision_baseline.unavailable() is None else "Pillow (no tv)"
    print(f"aigc buckets: {args.images} photos ({', '.join(f'{w}x{h}' for h, w in ASPECTS)}"
          f" x{args.scale:g}), {len(sampler.buckets)} buckets, batch {args.batch_size}, "
          f"{args.workers} workers, {args.store} shards, device {dev.describe(device)}; "
          f"first batch max diff {diff:.2f} levels")
    if "dali" in first:
        dali_diff = (first["dali"] - first["baseline"]).abs().max().item() * 127.5
        print(f"  NVIDIA DALI (JPEG files, float16 out): first batch max diff "
              f"{dali_diff:.2f} levels from Pillow's")
    rates: dict[str, list[float]] = {k: [] for k in named}
    for epoch in range(args.epochs + 1):  # the first pass of each is a warm-up
        for name, loader in named.items():
            rate, _ = one_pass(loader, device, name == "ours")
            if epoch:
                rates[name].append(rate)
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    labels = {"ours": "npu-data (shards, batched ResizeCrop)",
              "baseline": f"{tv} per sample, torch DataLoader",
              "dali": f"NVIDIA DALI CPU pipeline, {max(1, args.workers)} threads"}
    for name in med:
        print(f"  {labels[name]:<50} median {med[name]:8.1f} img/s "
              f"({min(rates[name]):.1f}-{max(rates[name]):.1f})")
    if "ours" in med and "baseline" in med:
        print(f"  ratio {med['ours'] / med['baseline']:.2f}x")
    if "ours" in med and med.get("dali", 0) > 0:
        print(f"  ratio to DALI {med['ours'] / med['dali']:.2f}x")
    roof = ceilings(named["ours"], sampler, device)
    if roof and "ours" in med:
        print(f"  ceilings over {roof['cores']} core(s): read {roof['read_ms']:.2f} + decode "
              f"{roof['decode_ms']:.2f} + kernels {roof['kernels_ms']:.2f} ms/img -> "
              f"{roof['ceiling_img_s']:.0f} img/s; ours at "
              f"{100 * med['ours'] / roof['ceiling_img_s']:.0f}%")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
