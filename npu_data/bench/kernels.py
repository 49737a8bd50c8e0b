"""Per-kernel cost: device kernels on a batch vs the per-sample CPU versions (ms per image).

    python -m npu_data.bench.kernels [--device cpu] [--batch 64] [--repeats 3] [--clock wall|cpu]
                                     [--out results.json]
    python -m npu_data.bench.kernels --costs [--out costs.json]

``--costs``: device ops per batch and peak device memory per kernel, counted on the host
(``npu_data.bench.device_costs``: the batch on the ``meta`` device, parameters drawn on the
host as the DataLoader draws them; deterministic), for batches of 16 and 64 images of
500x375 and 2000x1500: the Compose below, the classification recipe (``bench.recipe``'s
pipeline, RandomResizedCrop + flip + TrivialAugmentWide + RandomErasing + Normalize, then
MixUp or CutMix on its output, as ``bench.recipe.mix``) and each kernel on its own.

Batches of 500x375 images (resized_crop to 224; colour ops on the 224x224 crops), random
per-sample parameters; the median of ``--repeats`` runs after one warm-up. On the CPU the
default kernels are the compiled ones; the "torch kernels" column times the pure-torch
kernels (what runs on CUDA/NPU) on the same CPU. The last rows are whole transforms:
ColorJitter(0.4, 0.4, 0.4, 0.1) in per-sample random order, and the bench's Compose
(RandomResizedCrop(224) + that jitter + flip) on the 500x375 batch, against the same
per-sample Pillow ops. The augmentation rows run TrivialAugmentWide's kernels (rotate, the
pixel ops, one auto-augment step with a random op per sample) and the blur on the 224x224
crops, and TrivialAugmentWide whole on them. The last row times the keyed host draw of that
Compose's parameters against drawing them on the device with a generator.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import torch

from npu_data import device as dev
from npu_data.transforms import backends
from npu_data.transforms import functional as F
from npu_data.transforms.oracle import pillow as R
from npu_data.transforms.oracle.replay import replay_reference

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _time(fn: Callable[[], Any], repeats: int, sync: Callable[[], None],
          clock: Callable[[], float] = time.perf_counter) -> float:
    fn()
    sync()
    runs = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        sync()
        runs.append(clock() - t0)
    return statistics.median(runs)


_NO_REFERENCE = ("normalize (float32)", "policy_step (TrivialAugmentWide's pixel ops)")


def run(device: str = "cpu", batch: int = 64, repeats: int = 3, seed: int = 0,
        clock: str = "wall") -> list[dict[str, Any]]:
    """Measure every kernel; returns rows with ms/image for the batch kernel and the reference.
    ``clock="cpu"``: the process's CPU time (all its threads) instead of wall time: steadier
    on a shared host, not for device kernels (their time is the device's)."""
    tick = CLOCKS[clock]
    d = dev.resolve_device(device)
    rng = np.random.default_rng(seed)
    big = rng.integers(0, 256, (batch, 375, 500, 3), dtype=np.uint8)
    big[:, :, :, 1] = (big[:, :, :, 0] // 2 + np.arange(500, dtype=np.uint8)[None, None, :] // 4)
    x = torch.from_numpy(big).to(d).permute(0, 3, 1, 2)
    sizes = torch.tensor([[375, 500]] * batch, device=d)
    h = rng.integers(100, 376, batch)
    w = rng.integers(100, 501, batch)
    boxes = np.stack([rng.integers(0, 376 - h), rng.integers(0, 501 - w), h, w], 1)
    tboxes = torch.from_numpy(boxes).to(d)
    crops = F.resized_crop(x, sizes, tboxes, 224)
    csizes = torch.tensor([[224, 224]] * batch, device=d)
    small = crops.permute(0, 2, 3, 1).cpu().numpy()
    factors = torch.from_numpy(rng.uniform(0.6, 1.4, batch).astype(np.float32)).to(d)
    hues = torch.from_numpy(rng.uniform(-0.1, 0.1, batch).astype(np.float32)).to(d)
    flips = torch.from_numpy(rng.random(batch) < 0.5).to(d)
    f_np, h_np, fl_np = factors.cpu().numpy(), hues.cpu().numpy(), flips.cpu().numpy()

    def sync() -> None:
        dev.synchronize(d)

    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("resized_crop 500x375->224", lambda: F.resized_crop(x, sizes, tboxes, 224),
         lambda: [R.resized_crop(big[i], tuple(boxes[i]), 224) for i in range(batch)]),
        ("hflip", lambda: F.hflip(crops, csizes, flips),
         lambda: [R.hflip(small[i], bool(fl_np[i])) for i in range(batch)]),
        ("adjust_brightness", lambda: F.adjust_brightness(crops, csizes, factors),
         lambda: [R.adjust_brightness(small[i], float(f_np[i])) for i in range(batch)]),
        ("adjust_contrast", lambda: F.adjust_contrast(crops, csizes, factors),
         lambda: [R.adjust_contrast(small[i], float(f_np[i])) for i in range(batch)]),
        ("adjust_saturation", lambda: F.adjust_saturation(crops, csizes, factors),
         lambda: [R.adjust_saturation(small[i], float(f_np[i])) for i in range(batch)]),
        ("adjust_hue", lambda: F.adjust_hue(crops, csizes, hues),
         lambda: [R.adjust_hue(small[i], float(h_np[i])) for i in range(batch)]),
        ("normalize (float32)", lambda: F.normalize(crops, [0.485, 0.456, 0.406],
                                                    [0.229, 0.224, 0.225]), lambda: None),
    ]
    cases += _augment_cases(crops, csizes, small, rng)
    cases += _transform_cases(x, sizes, crops, csizes, big, small)
    compiled = backends.compiled_for(x)
    rows = []
    for name, kernel, ref in cases:
        k = _time(kernel, repeats, sync, tick) / batch * 1e3
        kt = float("nan")
        if compiled:
            with backends.torch_kernels():
                kt = _time(kernel, repeats, sync, tick) / batch * 1e3
        r = (_time(ref, repeats, lambda: None, tick) / batch * 1e3 if name not in _NO_REFERENCE
             else float("nan"))
        rows.append({"kernel": name, "device": str(d), "batch_ms_per_image": k,
                     "torch_kernels_ms_per_image": kt,
                     "reference_ms_per_image": r, "speedup": r / k if k > 0 else float("nan")})
    return rows


def _augment_cases(crops: torch.Tensor, csizes: torch.Tensor, small: np.ndarray,
                   rng: np.random.Generator
                   ) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """The augmentation kernels on the 224x224 crops (TrivialAugmentWide's ops, the blur),
    against the per-sample Pillow ops (the blur's reference: torchvision's float32 kernel)."""
    from npu_data.transforms.oracle import pillow_geometric as RG

    b, d = crops.shape[0], crops.device
    angles = rng.uniform(-30.0, 30.0, b)
    angle = torch.from_numpy(angles)
    f_np = rng.uniform(0.1, 1.9, b).astype(np.float32)
    factors = torch.from_numpy(f_np).to(d)
    bits, sigmas = rng.integers(2, 8, b), rng.uniform(0.5, 2.0, b).astype(np.float32)
    flip_np = rng.random(b) < 0.5
    flips = torch.from_numpy(flip_np).to(d)
    erase_np = np.stack([rng.integers(0, 112, b), rng.integers(0, 112, b),
                         rng.integers(20, 112, b), rng.integers(20, 112, b)], 1)
    erase_t = torch.from_numpy(erase_np).to(d)
    # TrivialAugmentWide's op mix: one op id per sample (Identity .. Equalize)
    op_ids = rng.integers(0, 14, b)
    levels = np.where(op_ids == F.POLICY_OPS.index("Posterize"), bits, 128)
    ops_t, levels_t = torch.from_numpy(op_ids), torch.from_numpy(levels)
    def rotate(interp: str) -> tuple[str, Callable[[], Any], Callable[[], Any]]:
        return (f"rotate ({interp})", lambda: F.rotate(crops, csizes, angle, interp),
                lambda: [RG.rotate(small[i], float(angles[i]), interp) for i in range(b)])

    cases = [rotate("nearest"), rotate("bilinear")]
    cases += [
        ("gaussian_blur 9x9", lambda: F.gaussian_blur(crops, csizes, 9, torch.from_numpy(sigmas)),
         lambda: [R.gaussian_blur(small[i], 9, float(sigmas[i])) for i in range(b)]),
        ("equalize", lambda: F.equalize(crops, csizes),
         lambda: [R.equalize(small[i]) for i in range(b)]),
        ("autocontrast", lambda: F.autocontrast(crops, csizes),
         lambda: [R.autocontrast(small[i]) for i in range(b)]),
        ("posterize", lambda: F.posterize(crops, csizes, torch.from_numpy(bits)),
         lambda: [R.posterize(small[i], int(bits[i])) for i in range(b)]),
        ("adjust_sharpness", lambda: F.adjust_sharpness(crops, csizes, factors),
         lambda: [R.adjust_sharpness(small[i], float(f_np[i])) for i in range(b)]),
        ("rgb_to_grayscale", lambda: F.rgb_to_grayscale(crops, csizes, flips),
         lambda: [R.rgb_to_grayscale(small[i]) if flip_np[i] else small[i].copy()
                  for i in range(b)]),
        ("vflip", lambda: F.vflip(crops, csizes, flips),
         lambda: [RG.vflip(small[i], bool(flip_np[i])) for i in range(b)]),
        ("erase (RandomErasing's box)", lambda: F.erase(crops, csizes, erase_t, 0),
         lambda: [R.erase(small[i], tuple(erase_np[i]), 0) for i in range(b)]),
        ("policy_step (TrivialAugmentWide's pixel ops)",
         lambda: F.policy_step(crops, csizes, ops_t, factors, levels_t), lambda: None)]
    return cases


def _transform_cases(x: torch.Tensor, sizes: torch.Tensor, crops: torch.Tensor,
                     csizes: torch.Tensor, big: np.ndarray, small: np.ndarray
                     ) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    from npu_data.bench.pillow_baseline import augmentation
    from npu_data.transforms import ColorJitter, TrivialAugmentWide
    from npu_data.transforms.draws import sample_keys

    out: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = []
    for name, t, batch, images in (
            ("ColorJitter(0.4,0.4,0.4,0.1), random order", ColorJitter(0.4, 0.4, 0.4, 0.1),
             {"image": crops, "sizes": csizes}, small),
            ("TrivialAugmentWide (224x224)", TrivialAugmentWide(),
             {"image": crops, "sizes": csizes}, small),
            ("Compose: crop 224 + jitter + flip", augmentation(224), {"image": x, "sizes": sizes},
             big)):
        # parameters drawn on the host, as the DataLoader draws them
        n = images.shape[0]
        params = t.draw_keyed(batch["sizes"].cpu().numpy(), sample_keys(0, 0, np.arange(n)))

        def kernel(t: Any = t, batch: dict[str, Any] = batch, params: Any = params) -> Any:
            return t.apply(batch, params)

        def ref(t: Any = t, images: np.ndarray = images, params: Any = params, n: int = n
                ) -> Any:
            return [replay_reference(t, images[i], params, i) for i in range(n)]

        out.append((name, kernel, ref))
    # The parameters of that Compose drawn per sample on the host (keyed by seed, epoch,
    # index: what the DataLoader does for every batch) against drawing them from a generator
    # on the device (read back to the same host sampler): the "reference" column.
    pipe = augmentation(224)
    host_sizes = sizes.cpu().numpy()
    keys = sample_keys(0, 0, np.arange(host_sizes.shape[0]))
    gen = dev.manual_seed(0, x.device)
    full = {"image": x, "sizes": sizes}
    out.append(("keyed host draw (Compose params)",
                lambda: pipe.draw_keyed(host_sizes, keys),
                lambda: [t.get_params(full, gen) for t in pipe.transforms]))
    return out


def _cost_row(name: str, batch: int, fn: Callable[[], Any], image: torch.Tensor,
              others: list[torch.Tensor]) -> dict[str, Any]:
    from npu_data.bench.device_costs import measure

    fn()  # first use builds the kernels' tables
    c = measure(fn, [image, *others])
    in_bytes = image.numel() * image.element_size()
    return {"case": name, "batch": batch, "input": "x".join(str(d) for d in image.shape[-2:][::-1]),
            "device_ops": c.ops, "non_view_ops": c.non_views, "peak_bytes": c.peak_bytes,
            "input_bytes": in_bytes, "peak_over_input": c.peak_bytes / in_bytes,
            "by_op": c.by_op}


def costs(batches: tuple[int, ...] = (16, 64),
          sizes: tuple[tuple[int, int], ...] = ((375, 500), (1500, 2000)),
          crop: int = 224) -> list[dict[str, Any]]:
    """Device ops and peak device bytes per call (see the module docstring)."""
    from npu_data.bench.pillow_baseline import augmentation
    from npu_data.transforms.draws import sample_keys

    meta = torch.device("meta")
    rows: list[dict[str, Any]] = []
    for b in batches:
        keys = sample_keys(0, 0, np.arange(b))
        for h, w in sizes:
            x = torch.empty((b, h, w, 3), dtype=torch.uint8, device=meta).permute(0, 3, 1, 2)
            sz = torch.tensor([[h, w]] * b).to(meta)
            pipe = augmentation(crop)
            params = pipe.draw_keyed(np.array([[h, w]] * b), keys)
            rows += _crop_costs(b, crop, x, sz, pipe, params)
            rows += _recipe_costs(b, crop, x, sz, keys)
        rows += _colour_costs(b, crop, keys)
    return rows


def _crop_costs(b: int, crop: int, x: torch.Tensor, sz: torch.Tensor, pipe: Any,
                params: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """The Compose and its crop on their own."""
    batch = {"image": x, "sizes": sz}
    boxes = params["0.boxes"]
    return [_cost_row(f"Compose: crop {crop} + jitter + flip", b,
                      lambda: pipe.apply(batch, params), x, [sz]),
            _cost_row(f"resized_crop {crop}", b,
                      lambda: F.resized_crop(x, sz, boxes, crop), x, [sz])]


def _recipe_costs(b: int, crop: int, x: torch.Tensor, sz: torch.Tensor, keys: np.ndarray
                  ) -> list[dict[str, Any]]:
    """The classification recipe's keyed Compose, then MixUp or CutMix on its output (the
    labels already on the device), as ``bench.recipe`` runs a batch."""
    from npu_data.bench.recipe import CUTMIX_ALPHA, MIX_POSITION, MIXUP_ALPHA, pipeline
    from npu_data.transforms import CutMix, MixUp

    pipe = pipeline(crop)
    h, w = x.shape[-2:]
    params = pipe.draw_keyed(np.array([[h, w]] * b), keys)
    label = torch.empty(b, dtype=torch.int64, device=x.device)
    batch = {"image": x, "sizes": sz}
    rows = []
    for name, mix in (("MixUp", MixUp(MIXUP_ALPHA, 1000)), ("CutMix", CutMix(CUTMIX_ALPHA, 1000))):
        mix_params = mix.draw_keyed(np.array([[crop, crop]] * b), keys, MIX_POSITION + 1)

        def fn(mix: Any = mix, mix_params: Any = mix_params) -> Any:
            out = pipe.apply(batch, params)
            return mix.apply({"image": out["image"], "sizes": out["sizes"], "label": label},
                             mix_params)

        rows.append(_cost_row(f"recipe: crop {crop} + flip + TrivialAugmentWide + erase + "
                              f"normalize, then {name}", b, fn, x, [sz, label]))
    return rows


def _colour_costs(b: int, crop: int, keys: np.ndarray) -> list[dict[str, Any]]:
    """Each colour kernel, the jitter and the flip on their own, on ``b`` crops."""
    from npu_data.transforms import ColorJitter

    meta = torch.device("meta")
    small = torch.empty((b, crop, crop, 3), dtype=torch.uint8, device=meta).permute(0, 3, 1, 2)
    ssz = torch.tensor([[crop, crop]] * b).to(meta)
    rng = np.random.default_rng(b)
    f = torch.from_numpy(rng.uniform(0.6, 1.4, b).astype(np.float32))
    hues = torch.from_numpy(rng.uniform(-0.1, 0.1, b).astype(np.float32))
    flips = torch.from_numpy(rng.random(b) < 0.5)
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1)
    jparams = jitter.draw_keyed(np.array([[crop, crop]] * b), keys)
    small_batch = {"image": small, "sizes": ssz}
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("ColorJitter(0.4,0.4,0.4,0.1), random order",
         lambda: jitter.apply(small_batch, jparams)),
        ("adjust_brightness", lambda: F.adjust_brightness(small, ssz, f)),
        ("adjust_contrast", lambda: F.adjust_contrast(small, ssz, f)),
        ("adjust_saturation", lambda: F.adjust_saturation(small, ssz, f)),
        ("adjust_hue", lambda: F.adjust_hue(small, ssz, hues)),
        ("hflip", lambda: F.hflip(small, ssz, flips))]
    return [_cost_row(name, b, fn, small, [ssz]) for name, fn in cases]


def print_costs(rows: list[dict[str, Any]]) -> None:
    """The cost rows as a Markdown table."""
    print("| case | batch | input (WxH) | device ops | not views | peak device MB | "
          "peak / input |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['batch']} | {r['input']} | {r['device_ops']} | "
              f"{r['non_view_ops']} | {r['peak_bytes'] / 1e6:.1f} | "
              f"{r['peak_over_input']:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    """CLI entry: print a Markdown table, optionally write JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall time, or the process's CPU time (steadier on a shared host)")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--costs", action="store_true",
                   help="count device ops and peak device memory instead of timing")
    a = p.parse_args(argv)
    if a.costs:
        cost_rows = costs()
        print_costs(cost_rows)
        if a.out:
            with open(a.out, "wb") as fh:
                fh.write(orjson.dumps(cost_rows, option=orjson.OPT_INDENT_2))
        return 0
    rows = run(a.device, a.batch, a.repeats, clock=a.clock)
    print(f"torch threads: {torch.get_num_threads()}, device: "
          f"{dev.describe(dev.resolve_device(a.device))}, clock: {a.clock}")
    print("| kernel | batch kernel ms/img | torch kernels ms/img | per-sample Pillow ms/img | "
          "Pillow / batch kernel |")
    print("|---|---:|---:|---:|---:|")
    def cell(v: float, fmt: str, unit: str = "") -> str:
        return "—" if v != v else format(v, fmt) + unit  # NaN: not measured

    for r in rows:
        print(f"| {r['kernel']} | {r['batch_ms_per_image']:.3f} | "
              f"{cell(r['torch_kernels_ms_per_image'], '.3f')} | "
              f"{cell(r['reference_ms_per_image'], '.3f')} | {cell(r['speedup'], '.2f', 'x')} |")
    if a.out:
        with open(a.out, "wb") as fh:
            fh.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
