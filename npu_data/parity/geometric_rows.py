"""The parity suite's geometric rows (``npu-data parity``): affine and rotate (nearest and
bilinear), vflip, zoom-out and scale jitter on the suite's padded batches, each sample
against the Pillow reference as torchvision's PIL kernels run it
(:mod:`npu_data.transforms.oracle.pillow_geometric`)."""

from __future__ import annotations

import numpy as np
import torch

from npu_data.transforms.oracle.measures import RowAccumulator

GEOMETRIC_ROWS = ("affine_nearest", "affine_bilinear", "rotate_nearest", "rotate_bilinear",
                  "vflip", "zoom_out", "scale_jitter", "iou_crop")


def _sample(out: torch.Tensor, i: int, h: int, w: int) -> np.ndarray:
    return out[i, :, :h, :w].permute(1, 2, 0).cpu().numpy()


def geometric_rows(accs: dict[str, RowAccumulator], rng: np.random.Generator,
                   imgs: list[np.ndarray], images: torch.Tensor, sizes: torch.Tensor,
                   sizes_cpu: torch.Tensor) -> None:
    """Add one comparison per sample to each geometric row present in ``accs``."""
    from npu_data.transforms import RandomIoUCrop, RandomZoomOut, ScaleJitter
    from npu_data.transforms import functional as F
    from npu_data.transforms.draws import sample_keys
    from npu_data.transforms.oracle import pillow_geometric as RG
    from npu_data.transforms.oracle.replay import sample_image

    n = len(imgs)
    hw = sizes_cpu.tolist()
    angle = rng.uniform(-180, 180, n)
    angle[: min(n, 4)] = (0.0, 90.0, 180.0, -45.0)[: min(n, 4)]  # exact turns, then a diagonal
    p = {"angle": torch.tensor(angle, dtype=torch.float32),
         "translate": torch.tensor(rng.uniform(-10, 10, (n, 2)), dtype=torch.float32),
         "scale": torch.tensor(rng.uniform(0.5, 1.6, n), dtype=torch.float32),
         "shear": torch.tensor(rng.uniform(-30, 30, (n, 2)), dtype=torch.float32)}
    fill = tuple(int(v) for v in rng.integers(0, 256, 3))
    for interp in ("nearest", "bilinear"):
        out = F.affine(images, sizes_cpu, p["angle"], p["translate"], p["scale"], p["shear"],
                       interp, fill)
        rot = F.rotate(images, sizes_cpu, p["angle"], interp, fill)
        for i, img in enumerate(imgs):
            ref = RG.affine(img, float(p["angle"][i]), p["translate"][i].tolist(),
                            float(p["scale"][i]), p["shear"][i].tolist(), interp, fill)
            accs[f"affine_{interp}"].add(ref, _sample(out, i, *hw[i]))
            accs[f"rotate_{interp}"].add(RG.rotate(img, float(p["angle"][i]), interp, fill),
                                         _sample(rot, i, *hw[i]))
    flips = torch.from_numpy(rng.random(n) < 0.5)
    out = F.vflip(images, sizes, flips.to(images.device))
    for i, img in enumerate(imgs):
        accs["vflip"].add(RG.vflip(img, bool(flips[i])), _sample(out, i, *hw[i]))
    batch = {"image": images, "sizes": sizes}
    keys = sample_keys(int(rng.integers(1 << 31)), 0, np.arange(n))
    for name, t in (("zoom_out", RandomZoomOut(fill, (1.0, 2.5), p=0.8)),
                    ("scale_jitter", ScaleJitter((96, 128), (0.2, 2.0)))):
        params = t.draw_keyed(sizes_cpu.numpy(), keys)
        result = t.apply(batch, params)
        for i in range(n):
            ref = t.reference(sample_image(batch, i), params, i)
            accs[name].add(ref, sample_image(result, i))
    # IoU crop: three random boxes per image, the crop chosen on the device
    hw_np = sizes_cpu.numpy().astype(np.float64)[:, None, ::-1]  # (w, h)
    a, b = rng.random((n, 3, 2)) * hw_np, rng.random((n, 3, 2)) * hw_np
    xyxy = torch.from_numpy(np.concatenate([np.minimum(a, b), np.maximum(a, b) + 0.5], -1))
    iou = RandomIoUCrop(trials=20, rounds=6)
    params = iou.draw_keyed(sizes_cpu.numpy(), keys)
    result = iou.apply({**batch, "boxes.xyxy": xyxy.to(torch.float32).to(images.device)}, params)
    for i in range(n):
        ref = iou.reference(sample_image(batch, i), params, i)
        accs["iou_crop"].add(ref, sample_image(result, i))
