"""End-to-end loader benchmark, side by side in one run (batches of 64, 2 workers each).

    python -m benches.pipeline [--images 512] [--batch 64] [--workers 2] [--epochs 3]

ours:     DataLoader over raw shards + device Compose([RandomResizedCrop(224),
          ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()]) on whole batches
baseline: torch DataLoader reading the JPEG files, Pillow decode and the same augmentation
          per sample with the CPU reference (each transform's ``apply_reference``)
Epochs are interleaved; the median img/s of each is printed, then a stage breakdown
(read, collate, H2D, augment) measured on the main process. ``--source memmap`` serves our
side from the decoded pixels in one memory map when the shard import is unavailable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from npu_data import device as dev
from npu_data.loaders import DataLoader, collate_samples
from npu_data.loaders.dataloader import to_device


def augmentation() -> Any:
    from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

    return Compose([RandomResizedCrop(224), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


class JpegReference(torch.utils.data.Dataset):
    """The baseline: Pillow decode + per-sample CPU reference augmentation."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.augment = augmentation()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.files[i]) as im:
            img = np.asarray(im.convert("RGB"))
        g = torch.Generator().manual_seed(i)
        for t in self.augment.transforms:
            one = {"image": torch.from_numpy(np.array(img)).permute(2, 0, 1)[None],
                   "sizes": torch.tensor([img.shape[:2]])}
            img = t.apply_reference(img, t.get_params(one, g), 0)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1)


class DecodedMemmap:
    """Decoded pixels of equal-size JPEGs in one memory map (ShardDataset-like samples)."""

    def __init__(self, files: list[Path], path: Path) -> None:
        with Image.open(files[0]) as im:
            w, h = im.size
        self.shape = (len(files), h, w, 3)
        if not path.exists():
            mm = np.memmap(path, np.uint8, "w+", shape=self.shape)
            for i, f in enumerate(files):
                with Image.open(f) as im:
                    mm[i] = np.asarray(im.convert("RGB"))
            mm.flush()
            del mm
        self.path = path
        self._mm: np.ndarray | None = None

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._mm is None:
            self._mm = np.memmap(self.path, np.uint8, "r", shape=self.shape)
        return {"image": self._mm[i], "index": int(i), "task_id": int(i)}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mm": None}


def _ours_dataset(root: Path, proj: Any, files: list[Path], source: str) -> Any:
    if source == "memmap":
        return DecodedMemmap(files, root / f"decoded_{len(files)}.u8")
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.source import image_options
    from npu_data.shards.writer import WriteOptions, write_dataset

    out = root / f"shards_{len(files)}"
    if not (out / "manifest.json").is_file():
        write_dataset(proj.export_path, out, WriteOptions(
            store="raw", workers=2, images=image_options(proj.export_path)))
    return ShardDataset(out)


def _epoch(loader: Any, device: torch.device) -> float:
    t = time.perf_counter()
    n = 0
    for b in loader:
        img = b["image"] if isinstance(b, dict) else b
        n += int(img.shape[0])
    dev.synchronize(device)
    return n / (time.perf_counter() - t)


def _stages(ds: Any, augment: Any, device: torch.device, batch: int) -> dict[str, float]:
    """Milliseconds per image of each stage of ours, on the main process."""
    idx = list(range(min(len(ds), 4 * batch)))
    t = time.perf_counter()
    samples = [ds[i] for i in idx]
    read = time.perf_counter() - t
    t = time.perf_counter()
    batches = [collate_samples(samples[a:a + batch], pin=True) for a in range(0, len(idx), batch)]
    coll = time.perf_counter() - t
    t = time.perf_counter()
    moved = [to_device(b, device, non_blocking=True) for b in batches]
    dev.synchronize(device)
    h2d = time.perf_counter() - t
    gen = torch.Generator(device=device).manual_seed(0)
    augment(moved[0], generator=gen)  # warm-up
    dev.synchronize(device)
    t = time.perf_counter()
    for b in moved:
        augment(b, generator=gen)
    dev.synchronize(device)
    aug = time.perf_counter() - t
    k = 1000 / len(idx)
    return {"read": read * k, "collate": coll * k, "H2D": h2d * k, "augment": aug * k}


def _baseline_stages(files: list[Path], n: int) -> dict[str, float]:
    ds = JpegReference(files)
    t = time.perf_counter()
    imgs = []
    for i in range(n):
        with Image.open(files[i]) as im:
            imgs.append(np.asarray(im.convert("RGB")))
    read = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n):
        ds[i]
    total = time.perf_counter() - t
    return {"read+decode": read * 1000 / n, "augment": (total - read) * 1000 / n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--source", choices=("shards", "memmap"), default="shards")
    p.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "npu-data-bench"))
    a = p.parse_args(argv)
    from npu_data.sample_data import make_bench_images

    root = Path(a.work_dir)
    proj_dir = root / f"jpeg_{a.images}_500x375"
    if not (proj_dir / "export.json").is_file():
        proj = make_bench_images(proj_dir, n=a.images)
    else:
        from npu_data.sample_data import SampleProject

        proj = SampleProject(proj_dir / "export.json", proj_dir / "images",
                             proj_dir / "labeling_config.xml")
    files = sorted((proj_dir / "images").glob("*.jpg"))
    device = dev.resolve_device(a.device)
    augment = augmentation()
    ds = _ours_dataset(root, proj, files, a.source)
    ours = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                      pin_memory=True, persistent_workers=True, prefetch_factor=4,
                      device=device, transform=augment, seed=0)
    base = torch.utils.data.DataLoader(JpegReference(files), batch_size=a.batch, shuffle=True,
                                       num_workers=a.workers, persistent_workers=True,
                                       prefetch_factor=4)
    print(f"pipeline: {len(files)} JPEGs 500x375, batch {a.batch}, {a.workers} workers each, "
          f"device {dev.describe(device)}, ours from {a.source}")
    _epoch(ours, device)
    _epoch(base, torch.device("cpu"))  # warm-up both
    r_ours, r_base = [], []
    for e in range(a.epochs):
        r_ours.append(_epoch(ours, device))
        r_base.append(_epoch(base, torch.device("cpu")))
        print(f"  epoch {e}: ours {r_ours[-1]:7.0f} img/s   baseline {r_base[-1]:7.0f} img/s")
    mo, mb = statistics.median(r_ours), statistics.median(r_base)
    print(f"median: ours {mo:.0f} img/s, baseline {mb:.0f} img/s, ratio {mo / mb:.2f}x")
    st = _stages(ds, augment, device, a.batch)
    print("ours, ms/img on the main process: " + ", ".join(f"{k} {v:.3f}" for k, v in st.items()))
    bs = _baseline_stages(files, min(64, len(files)))
    print("baseline, ms/img: " + ", ".join(f"{k} {v:.3f}" for k, v in bs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
