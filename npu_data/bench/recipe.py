"""The classification recipe row: torchvision's reference training recipe per sample against
ours batched, 224 px, the same JPEGs, batch size and worker count.

    python -m npu_data.bench.recipe [--images 512] [--width 500] [--height 375] [--crop 224]
                                    [--batch-size 64] [--workers 2] [--epochs 3]
                                    [--classes 1000] [--device auto] [--stages]
    python -m npu_data.bench.recipe --quick      # tiny sizes: checks that it runs and agrees

baseline: torch DataLoader over the JPEG files (``npu_data.bench.bench_data``), Pillow decode,
          torchvision v2 ``RandomResizedCrop(crop)``, ``RandomHorizontalFlip()``,
          ``TrivialAugmentWide(bilinear)``, ``PILToTensor``, ``ToDtype(float32, scale)``,
          ``Normalize(ImageNet)``, ``RandomErasing(p=0.25)`` per sample, then
          ``RandomChoice([MixUp(0.2), CutMix(1.0)])`` on the batch in ``collate_fn`` (the
          recipe of torchvision's ``references/classification``). Without torchvision: the
          per-sample Pillow reference of our pipeline (``Compose.reference``) instead.
ours:     npu_data ``DataLoader`` over the encoded shards of the same JPEGs, keyed
          ``Compose([RandomResizedCrop(crop), RandomHorizontalFlip(),
          TrivialAugmentWide(bilinear), RandomErasing(p=0.25, value=ImageNet mean levels),
          Normalize()])`` on whole batches on ``--device`` (erasing before Normalize with the
          mean levels is torchvision's 0 after it, to within half a level), then MixUp or
          CutMix on the batch (:func:`mix`, the choice keyed like every draw).

Labels are ``index % classes`` for both. The draws differ (torch's RNG against our keyed
draws), so the two rows do the same kind of work, not the same pixels; ours' first batch is
checked against our own per-sample Pillow reference instead (before the mixing). When Kornia
(with ``kornia.augmentation.auto``) imports, a third row runs its version of the recipe on
our DataLoader's batches (:class:`KorniaRecipe`); DALI has no row. Epochs are
interleaved (one warm-up each); the median, the spread and the ratio are printed, then the
row's ceilings (:func:`ceilings`) and ours as a percentage of the combined one;
``--stages`` adds ours' time per stage on one batch in this process (where the time goes).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from npu_data.bench import torchvision_baseline

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
MIXUP_ALPHA, CUTMIX_ALPHA = 0.2, 1.0  # torchvision's ImageNet recipe
ERASE_P = 0.25
MIX_POSITION = 1 << 20  # the keyed draw position of the batch's MixUp / CutMix choice


def pipeline(crop: int) -> Any:
    """Our per-sample stages of the recipe, as one keyed Compose."""
    from npu_data.transforms import (
        Compose,
        Normalize,
        RandomErasing,
        RandomHorizontalFlip,
        RandomResizedCrop,
        TrivialAugmentWide,
    )

    mean_levels = tuple(round(m * 255) for m in MEAN)
    return Compose([RandomResizedCrop(crop), RandomHorizontalFlip(),
                    TrivialAugmentWide(interpolation="bilinear"),
                    RandomErasing(p=ERASE_P, value=mean_levels), Normalize(MEAN, STD)])


def mix(batch: dict[str, Any], classes: int, seed: int, epoch: int) -> dict[str, Any]:
    """MixUp or CutMix (one coin per batch, keyed by its samples) on ``batch``'s images with
    labels ``index % classes``: ``{"image", "sizes", "label" (B, classes)}``."""
    from npu_data.transforms import CutMix, MixUp
    from npu_data.transforms.draws import Draws, sample_keys

    index = batch["index"].cpu().numpy()
    keys = sample_keys(seed, epoch, index)
    coin = Draws(keys, MIX_POSITION).uniform(1)[int(np.argmin(keys)), 0]
    t = MixUp(MIXUP_ALPHA, classes) if coin < 0.5 else CutMix(CUTMIX_ALPHA, classes)
    image = batch["image"]
    cls = {"image": image, "sizes": batch["sizes"],
           "label": torch.as_tensor(index % classes).to(image.device)}
    params = t.draw_keyed(batch["sizes"].cpu().numpy(), keys, MIX_POSITION + 1)
    return t.apply(cls, params)  # type: ignore[no-any-return]


def ours_loader(shards: Path, args: argparse.Namespace, transform: Any = "recipe") -> Any:
    """Our DataLoader over ``shards`` with the recipe's Compose (``transform=None``: the
    decoded uint8 batches, for Kornia)."""
    from npu_data.loaders import DataLoader
    from npu_data.shards.reader import ShardDataset

    return DataLoader(ShardDataset(shards), batch_size=args.batch_size, shuffle=True,
                      num_workers=args.workers, pin_memory=True,
                      persistent_workers=args.workers > 0,
                      prefetch_factor=4 if args.workers else None, device=args.device,
                      transform=pipeline(args.crop) if transform == "recipe" else transform,
                      seed=0)


class TorchvisionRecipe(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """One JPEG through Pillow and torchvision's classification preset; label ``i % classes``."""

    def __init__(self, files: list[Path], crop: int, classes: int) -> None:
        from torchvision.transforms import v2

        self.files, self.classes = files, classes
        self.transforms = v2.Compose([
            v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
            v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
            v2.RandomErasing(p=ERASE_P), v2.ToPureTensor()])

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        with Image.open(self.files[i]) as im:
            return self.transforms(im.convert("RGB")), i % self.classes


class TorchvisionMix:
    """torchvision's ``collate_fn``: stack, then ``RandomChoice([MixUp, CutMix])``."""

    def __init__(self, classes: int) -> None:
        from torchvision.transforms import v2

        self.mix = v2.RandomChoice([v2.MixUp(alpha=MIXUP_ALPHA, num_classes=classes),
                                    v2.CutMix(alpha=CUTMIX_ALPHA, num_classes=classes)])

    def __call__(self, items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, Any]:
        images, labels = torch.utils.data.default_collate(items)
        return self.mix(images, labels)  # type: ignore[no-any-return]


class PillowRecipe(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Without torchvision: one JPEG through our pipeline's Pillow reference (parameters keyed
    as epoch 0's), normalised; label ``i % classes``."""

    def __init__(self, files: list[Path], crop: int, classes: int) -> None:
        self.files, self.classes, self.pipe = files, classes, pipeline(crop)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        with Image.open(self.files[i]) as im:
            img = np.asarray(im.convert("RGB"))
        return reference_sample(self.pipe, img, i), i % self.classes


class PillowMix:
    """Stack, then our MixUp or CutMix on the host batch (the fallback's ``collate_fn``)."""

    def __init__(self, classes: int) -> None:
        self.classes, self.batches = classes, 0

    def __call__(self, items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, Any]:
        images = torch.stack([x for x, _ in items])
        index = torch.tensor([i for _, i in items])
        sizes = torch.tensor([list(images.shape[-2:])] * len(items))
        self.batches += 1
        out = mix({"image": images, "sizes": sizes, "index": index}, self.classes, 0,
                  self.batches)
        return out["image"], out["label"]


class KorniaRecipe:
    """Kornia's version of the recipe on our DataLoader's uint8 batches (the bench images
    share one size, so the padded batch is the image): float in [0, 1],
    ``AugmentationSequential(RandomResizedCrop, RandomHorizontalFlip, auto.TrivialAugment,
    Normalize, RandomErasing(p=0.25))``, then ``RandomMixUpV2`` or ``RandomCutMixV2`` (a coin
    per batch; Kornia's MixUp draws lam uniformly, not from Beta(0.2, 0.2))."""

    def __init__(self, crop: int, classes: int) -> None:
        import kornia.augmentation as K
        from kornia.augmentation.auto import TrivialAugment

        self.classes = classes
        self.aug = K.AugmentationSequential(
            K.RandomResizedCrop((crop, crop)), K.RandomHorizontalFlip(), TrivialAugment(),
            K.Normalize(torch.tensor(MEAN), torch.tensor(STD)), K.RandomErasing(p=ERASE_P))
        keys = ["input", "class"]
        self.mixers = (K.RandomMixUpV2(data_keys=keys),
                       K.RandomCutMixV2(data_keys=keys, use_correct_lambda=True))

    def __call__(self, batch: dict[str, Any]) -> torch.Tensor:
        x = self.aug(batch["image"].to(torch.float32) / 255)
        label = batch["index"] % self.classes
        mixer = self.mixers[int(torch.randint(0, 2, ()))]
        out, _ = mixer(x, label)  # the image and (label, partner's label, lam) rows
        return out  # type: ignore[no-any-return]


def kornia_missing() -> str | None:
    """Why Kornia's row cannot run here (None when it can)."""
    import importlib.util

    if importlib.util.find_spec("kornia") is None:
        return "not installed"
    try:
        from kornia.augmentation.auto import TrivialAugment  # noqa: F401
    except Exception as exc:  # a Kornia without auto-augment, or one that fails to import
        return f"does not import ({str(exc).splitlines()[0][:80]})"
    return None


def reference_sample(pipe: Any, img: np.ndarray, i: int, seed: int = 0) -> torch.Tensor:
    """Sample ``i`` (HxWx3 uint8) through ``pipe``'s Pillow reference with the parameters our
    loader draws for it in epoch 0: (3, H, W) float32, normalised."""
    from npu_data.transforms.draws import sample_keys

    sizes = np.array([img.shape[:2]], np.int64)
    params = pipe.draw_keyed(sizes, sample_keys(seed, 0, [i]))
    return chw(pipe.reference(img, params, 0))


def chw(img: np.ndarray) -> torch.Tensor:
    """The reference's HxWx3 float32 (normalised) as a (3, H, W) tensor."""
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


def baseline_loader(files: list[Path], args: argparse.Namespace) -> tuple[Any, str]:
    """torchvision's recipe in a torch DataLoader (our Pillow reference without it), label."""
    why = torchvision_baseline.unavailable()
    if why is None:
        ds: Any = TorchvisionRecipe(files, args.crop, args.classes)
        collate: Any = TorchvisionMix(args.classes)
        label = "torchvision v2 per sample (PIL), torch DataLoader"
    else:
        ds, collate = PillowRecipe(files, args.crop, args.classes), PillowMix(args.classes)
        label = f"our Pillow reference per sample ({why})"
    return torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        collate_fn=collate, persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers else None, pin_memory=torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(0)), label


def agreement(loader: Any, shards: Path, crop: int) -> tuple[float, float]:
    """Ours' first batch against our per-sample Pillow reference with the same drawn
    parameters: (max difference, share of values more than 1 level off), in 8-bit levels."""
    from npu_data.shards.reader import ShardDataset

    batch = next(iter(loader))
    ds, pipe = ShardDataset(shards), pipeline(crop)
    scale = torch.tensor(STD).view(3, 1, 1) * 255
    worst, off, total = 0.0, 0, 0
    for j, i in enumerate(batch["index"].cpu().tolist()):
        ref = chw(pipe.reference(np.asarray(ds[i]["image"]), batch["aug"], j))
        diff = (batch["image"][j].cpu() - ref).abs() * scale
        worst = max(worst, float(diff.max()))
        off += int((diff > 1.01).sum())
        total += diff.numel()
    return worst, off / max(total, 1)


def stage_times(shards: Path, args: argparse.Namespace, device: torch.device,
                reps: int = 2) -> dict[str, float]:
    """ms per batch of each stage of ours, in this process on ``device``: one batch of the
    first ``batch_size`` decoded images, keyed parameters, each stage on the previous one's
    output (warm-up call first), then the mixing."""
    from npu_data import device as dev
    from npu_data.shards.reader import ShardDataset
    from npu_data.transforms.draws import sample_keys

    ds = ShardDataset(shards)
    n = min(args.batch_size, len(ds))
    imgs = [np.asarray(ds[i]["image"]) for i in range(n)]
    h, w = max(im.shape[0] for im in imgs), max(im.shape[1] for im in imgs)
    x = torch.zeros(n, 3, h, w, dtype=torch.uint8)
    for i, im in enumerate(imgs):
        x[i, :, :im.shape[0], :im.shape[1]] = torch.from_numpy(im.copy()).permute(2, 0, 1)
    sizes = torch.tensor([im.shape[:2] for im in imgs])
    batch: dict[str, Any] = {"image": x.to(device), "sizes": sizes.to(device)}
    keys = sample_keys(0, 0, np.arange(n))
    out: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        result = fn()
        dev.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            result = fn()
        dev.synchronize(device)
        out[name] = (time.perf_counter() - t0) / reps * 1000
        return result

    for t in pipeline(args.crop).transforms:
        params = t.draw_keyed(batch["sizes"].cpu().numpy(), keys)
        batch = timed(repr(t), lambda t=t, b=batch, p=params: t.apply(b, p))
    batch["index"] = torch.arange(n)
    timed("MixUp or CutMix", lambda: mix(batch, args.classes, 0, 0))
    return out


def ceilings(shards: Path, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The row's ceilings (``stages.ceilings``): ours' stages timed on one thread — the
    columns read, the crops' JPEG regions decoded, the crop, the rest of the pipeline and the
    mixing on the host — spread over the cores this process may use."""
    from npu_data.bench import stage_times as stages
    from npu_data.loaders.placement import cores
    from npu_data.shards.reader import ShardDataset

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ds = ShardDataset(shards)
        n = min(128, len(ds))
        st = stages.keyed_stages(ds, pipeline(args.crop), n, args.batch_size, device, 2)
        b = min(args.batch_size, n)
        batch = {"image": torch.zeros(b, 3, args.crop, args.crop, device=device),
                 "sizes": torch.tensor([[args.crop, args.crop]] * b).to(device),
                 "index": torch.arange(b)}
        mix(batch, args.classes, 0, 0)  # warm-up
        t0 = time.perf_counter()
        for epoch in range(4):  # MixUp and CutMix both, as the coins fall
            mix(batch, args.classes, 0, epoch)
        st["augment"] = st.get("augment", 0.0) + (time.perf_counter() - t0) / 4 * 1000 / b
    finally:
        torch.set_num_threads(threads)
    return stages.ceilings(st, cores(), device.type == "cpu")


def one_pass(loader: Any, device: torch.device, ours: bool, args: argparse.Namespace,
             epoch: int, kornia: KorniaRecipe | None = None) -> float:
    """One epoch through ``loader``, mixing ours on the device, baseline's moved there,
    Kornia's augmented there (``kornia``)."""
    from npu_data import device as dev

    n, t0 = 0, time.perf_counter()
    for batch in loader:
        if kornia is not None:
            image = kornia(batch)
        elif ours:
            image = mix(batch, args.classes, 0, epoch)["image"]
        else:
            image = batch[0].to(device, non_blocking=True)
        n += image.shape[0]
    dev.synchronize(device)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    from npu_data import device as dev
    from npu_data.bench.bench_data import ensure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--stages", action="store_true",
                    help="also time each stage of ours on one batch, in this process")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a check that it runs")
    ap.add_argument("--work-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "npu-data-bench-recipe")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.width, args.height, args.crop = 16, 128, 96, 64
        args.batch_size, args.workers, args.epochs = min(args.batch_size, 8), 0, 1
    device = dev.resolve_device(args.device)
    args.device = str(device)
    data = ensure(args.work_dir, args.images, args.width, args.height)
    if data.encoded is None:
        print(f"recipe: no shards ({data.import_error})")
        return 1
    named = {"ours": ours_loader(data.encoded, args)}
    named["baseline"], base_label = baseline_loader(data.files, args)
    kornia = None if kornia_missing() else KorniaRecipe(args.crop, args.classes)
    if kornia is not None:
        named["kornia"] = ours_loader(data.encoded, args, transform=None)
    worst, off = agreement(named["ours"], data.encoded, args.crop)
    print(f"recipe: {args.images} JPEGs {args.width}x{args.height} -> {args.crop} px, batch "
          f"{args.batch_size}, {args.workers} workers, {args.classes} classes, device "
          f"{dev.describe(device)}; ours' first batch vs its per-sample Pillow reference: "
          f"max {worst:.2f} levels, {off:.2%} of values more than 1 level off")
    rates: dict[str, list[float]] = {k: [] for k in named}
    for epoch in range(args.epochs + 1):  # the first pass of each is a warm-up
        for name, loader in named.items():
            rate = one_pass(loader, device, name == "ours", args, epoch,
                            kornia if name == "kornia" else None)
            if epoch:
                rates[name].append(rate)
    labels = {"ours": "npu-data (encoded shards, batched)", "baseline": base_label,
              "kornia": "Kornia on our DataLoader's batches"}
    med = {k: statistics.median(v) for k, v in rates.items()}
    for name in named:
        print(f"  {labels[name]:<58} median {med[name]:8.1f} img/s "
              f"({min(rates[name]):.1f}-{max(rates[name]):.1f})")
    print(f"  ratio {med['ours'] / med['baseline']:.2f}x")
    if "kornia" in med:
        print(f"  ratio to Kornia {med['ours'] / med['kornia']:.2f}x")
    else:
        print(f"  Kornia: {kornia_missing()} (no row)")
    print("  NVIDIA DALI: no recipe pipeline in this bench (no row)")
    roof = ceilings(data.encoded, args, device)
    if roof:
        print(f"  ceilings over {roof['cores']} core(s): read {roof['read_ms']:.2f} + decode "
              f"{roof['decode_ms']:.2f} + kernels {roof['kernels_ms']:.2f} ms/img -> "
              f"{roof['ceiling_img_s']:.0f} img/s; ours at "
              f"{100 * med['ours'] / roof['ceiling_img_s']:.0f}%")
    if args.stages:
        print("  ours by stage (one batch, in process, ms):")
        for name, ms in stage_times(data.encoded, args, device).items():
            print(f"    {ms:9.1f}  {name}")
    return 0 if off < 0.01 else 1


if __name__ == "__main__":
    raise SystemExit(main())
