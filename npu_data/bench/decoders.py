"""JPEG decoders side by side: what a crop-aware reader can use (issue: read only what the
crop needs).

    python -m npu_data.bench.decoders [--images 200] [--width 500] [--height 375] [--crop 224]
                               [--threads 2] [--data-dir DIR]

On the bench's JPEGs (``npu_data.bench.bench_data``), per decoder: ms per image on one thread, img/s
with ``--threads`` threads (a decoder that holds the GIL does not scale), and the largest
difference to Pillow's full decode in 8-bit levels. Rows: Pillow (``Image.open`` +
``convert("RGB")``, what torchvision's PIL path runs), Pillow ``draft`` (DCT scaling to at
least the crop size: not exact), simplejpeg and torchvision.io when installed, and
npu-data's region decoder (``torch.ops.npu_data_jpeg``: libjpeg-turbo) on the whole image and
on the RandomResizedCrop boxes the loader would draw, on the files as they are and on the
restart-marked re-encode that ``npu-data import --store encoded`` stores.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from npu_data.transforms.base import CropParams

Decoder = Callable[[int], np.ndarray]


def _pillow(blobs: list[bytes]) -> Decoder:
    def run(i: int) -> np.ndarray:
        with Image.open(io.BytesIO(blobs[i])) as im:
            return np.asarray(im.convert("RGB"))
    return run


def _draft(blobs: list[bytes], crop: int) -> Decoder:
    def run(i: int) -> np.ndarray:
        with Image.open(io.BytesIO(blobs[i])) as im:
            im.draft("RGB", (crop, crop))
            return np.asarray(im.convert("RGB"))
    return run


def _simplejpeg(blobs: list[bytes]) -> Decoder | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    return lambda i: simplejpeg.decode_jpeg(blobs[i], colorspace="RGB")


def _torchvision(blobs: list[bytes]) -> Decoder | None:
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception:
        return None
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    return lambda i: decode_jpeg(data[i], mode=ImageReadMode.RGB).permute(1, 2, 0).numpy()


def _regions(blobs: list[bytes], boxes: np.ndarray, sizes: np.ndarray,
             scales: np.ndarray | None = None) -> Decoder | None:
    from npu_data import codecs

    jpeg = codecs.jpeg_ops()
    if jpeg is None:
        return None
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    box_t, size_t = torch.from_numpy(boxes), torch.from_numpy(sizes)
    scale_t = torch.from_numpy(scales if scales is not None else np.ones(len(blobs), np.int64))

    def run(i: int) -> np.ndarray:
        out, status = jpeg.decode_regions([data[i]], box_t[i:i + 1], size_t[i:i + 1],
                                          scale_t[i:i + 1])
        assert int(status[0]) == 0
        return out[0].numpy()  # type: ignore[no-any-return]
    return run


def _time(decode: Decoder, n: int, threads: int, repeats: int = 3) -> tuple[float, float]:
    """(ms per image on one thread, img/s on ``threads`` threads), medians of ``repeats``."""
    for i in range(min(n, 8)):
        decode(i)
    one, many = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for i in range(n):
            decode(i)
        one.append((time.perf_counter() - t) * 1000 / n)
        with ThreadPoolExecutor(threads) as pool:
            t = time.perf_counter()
            list(pool.map(decode, range(n)))
            many.append(n / (time.perf_counter() - t))
    return statistics.median(one), statistics.median(many)


def run(files: list[Path], crop: int, threads: int) -> list[dict[str, Any]]:
    """One row per decoder (see the module doc)."""
    from npu_data.bench.pillow_baseline import augmentation
    from npu_data.codecs import with_restarts
    from npu_data.transforms import draws

    blobs = [f.read_bytes() for f in files]
    marked = [with_restarts(b) for b in blobs]
    print(f"restart-marked: {sum(map(len, marked)) / sum(map(len, blobs)):.3f} of the bytes")
    reference = [_pillow(blobs)(i) for i in range(len(blobs))]
    sizes = np.array([r.shape[:2] for r in reference], dtype=np.int64)
    whole = np.concatenate([np.zeros_like(sizes), sizes], axis=1)
    first = augmentation(crop).transforms[0]
    keys = draws.sample_keys(0, 0, np.arange(len(blobs)))
    boxes = CropParams.of(first.draw_keyed(sizes, keys, draws.child_position(0, 0))
                          ).boxes.numpy()
    area = float(np.mean(boxes[:, 2] * boxes[:, 3] / (sizes[:, 0] * sizes[:, 1])))
    from npu_data.readers.read_crop import dct_scales, scaled_regions

    scales = dct_scales(boxes, first.size)
    scaled = scaled_regions(boxes, scales)
    rows: list[tuple[str, Decoder | None, np.ndarray | None]] = [
        ("Pillow (full decode)", _pillow(blobs), whole),
        (f"Pillow draft (DCT scaled to >= {crop}px, not exact)", _draft(blobs, crop), None),
        ("simplejpeg (full decode)", _simplejpeg(blobs), whole),
        ("torchvision.io.decode_jpeg (full decode)", _torchvision(blobs), whole),
        ("npu-data region decoder, whole image", _regions(blobs, whole, sizes), whole),
        (f"npu-data region decoder, crop boxes ({area:.0%} of the area on average)",
         _regions(blobs, boxes, sizes), boxes),
        (f"npu-data region decoder, crop boxes, decode='fast' ({np.mean(scales > 1):.0%} "
         "DCT-scaled)", _regions(blobs, scaled, sizes, scales), None),
        # what `npu-data import --store encoded` stores: the same JPEGs re-encoded losslessly
        # with restart markers, so a crop cuts out and decodes only the intervals around it
        ("npu-data region decoder, restart-marked (what encoded imports store), whole image",
         _regions(marked, whole, sizes), whole),
        ("npu-data region decoder, restart-marked, crop boxes", _regions(marked, boxes, sizes),
         boxes),
        ("npu-data region decoder, restart-marked, crop boxes, decode='fast'",
         _regions(marked, scaled, sizes, scales), None),
    ]
    out: list[dict[str, Any]] = []
    for label, decode, regions in rows:
        if decode is None:
            out.append({"decoder": label, "status": "not installed"})
            continue
        ms, rate = _time(decode, len(blobs), threads)
        diff: int | None = None
        if regions is not None:
            diff = 0
            for i in range(len(blobs)):
                t, left, h, w = (int(v) for v in regions[i])
                want = reference[i][t:t + h, left:left + w].astype(np.int16)
                diff = max(diff, int(np.abs(decode(i).astype(np.int16) - want).max()))
        out.append({"decoder": label, "ms_per_img": ms, "img_s_threads": rate,
                    "max_diff_levels": diff})
    out.append(_fast_error(blobs, reference, boxes, scaled, scales, sizes, first.size))
    return out


def _fast_error(blobs: list[bytes], reference: list[np.ndarray], boxes: np.ndarray,
                scaled: np.ndarray, scales: np.ndarray, sizes: np.ndarray,
                size: tuple[int, int]) -> dict[str, Any]:
    """decode='fast' against exact after the crop: levels of the resized crops."""
    from npu_data.transforms import functional as F

    fast = _regions(blobs, scaled, sizes, scales)
    diffs: list[np.ndarray] = []
    for i in np.flatnonzero(scales > 1).tolist():
        exact = torch.from_numpy(np.ascontiguousarray(reference[i])).permute(2, 0, 1)[None]
        want = F.resized_crop(exact, torch.tensor([reference[i].shape[:2]]),
                              torch.from_numpy(boxes[i:i + 1]), size)
        assert fast is not None
        region = torch.from_numpy(fast(i)).permute(2, 0, 1)[None]
        h, w = region.shape[2:]
        got = F.resized_crop(region, torch.tensor([[h, w]]), torch.tensor([[0, 0, h, w]]), size)
        diffs.append((got.to(torch.int16) - want.to(torch.int16)).abs().numpy())
    if not diffs:
        return {"decoder": "decode='fast' vs exact after the crop", "status":
                "no crop box is twice the output here (use larger images)"}
    d = np.concatenate([x.ravel() for x in diffs])
    return {"decoder": f"decode='fast' vs exact after the crop ({len(diffs)} DCT-scaled "
            f"samples): max {int(d.max())}, mean {float(d.mean()):.2f} levels",
            "status": "error only"}


def markdown(rows: list[dict[str, Any]], threads: int) -> str:
    lines = [f"| decoder | ms/img (1 thread) | img/s ({threads} threads) | max diff to Pillow |",
             "|---|---:|---:|---:|"]
    for r in rows:
        if "status" in r:
            lines.append(f"| {r['decoder']} | {r['status']} | | |")
            continue
        diff = "—" if r["max_diff_levels"] is None else str(r["max_diff_levels"])
        lines.append(f"| {r['decoder']} | {r['ms_per_img']:.3f} | {r['img_s_threads']:,.0f} | "
                     f"{diff} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m npu_data.bench.decoders", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/npu-data-bench-decoders"))
    args = ap.parse_args(argv)
    from npu_data.tools.sample_data import make_bench_images

    root = args.data_dir / f"jpeg_{args.images}_{args.width}x{args.height}"
    files = sorted((root / "images").glob("*.jpg"))
    if len(files) != args.images:
        make_bench_images(root, n=args.images, width=args.width, height=args.height)
        files = sorted((root / "images").glob("*.jpg"))
    torch.set_num_threads(1)  # one decode per thread; the pool supplies the parallelism
    print(f"{args.images} JPEGs {args.width}x{args.height} (quality 90), crop {args.crop}")
    print(markdown(run(files, args.crop, args.threads), args.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
