"""The per-sample-order ColorJitter equals applying each sample's ops one by one, in order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from npu_data.transforms import ColorJitter
from npu_data.transforms import functional as F
from npu_data.transforms.color import OPS
from npu_data.transforms.oracle import pillow as R

KERNELS = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
           "saturation": F.adjust_saturation, "hue": F.adjust_hue}


@pytest.mark.parametrize("hue", [0.0, 0.1])
def test_random_order_equals_sequential_per_sample(hue: float) -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 256, (12, 3, 23, 31), dtype=torch.uint8, generator=g)
    sizes = torch.tensor([[23, 31]] * 6 + [[17, 20]] * 6)
    x[6:, :, 17:, :] = 0
    x[6:, :, :, 20:] = 0
    batch = {"image": x, "sizes": sizes}
    jitter = ColorJitter(0.5, 0.5, 0.5, hue)
    out, params = jitter.run(batch, generator=g)
    assert len({tuple(r) for r in params["order"].tolist()}) > 1  # orders really differ
    for i in range(12):
        img, sz = x[i : i + 1], sizes[i : i + 1]
        for op_id in params["order"][i].tolist():
            op = OPS[op_id]
            img = KERNELS[op](img, sz, params[op][i : i + 1])
        h, w = sizes[i].tolist()
        assert torch.equal(out["image"][i, :, :h, :w], img[0, :, :h, :w]), f"sample {i}"


def test_random_order_padding_matches_the_kernels() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8, generator=g)
    sizes = torch.tensor([[10, 12]] * 8)
    out, params = ColorJitter(0.5, 0.5, 0.5).run({"image": x, "sizes": sizes}, generator=g)
    for i in range(8):
        img = x[i : i + 1]
        for op_id in params["order"][i].tolist():
            img = KERNELS[OPS[op_id]](img, sizes[i : i + 1], params[OPS[op_id]][i : i + 1])
        assert torch.equal(out["image"][i], img[0])


def _odd_padded(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    sizes = [(int(rng.integers(1, 38)), int(rng.integers(1, 30))) for _ in range(n)]
    sizes[0] = (37, 29)
    x = torch.zeros(n, 3, 37, 29, dtype=torch.uint8)
    for i, (h, w) in enumerate(sizes):
        x[i, :, :h, :w] = torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8))
    return x, torch.tensor(sizes)


REFERENCE = {0: R.adjust_brightness, 1: R.adjust_contrast, 2: R.adjust_saturation,
             3: R.adjust_hue}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 17])
def test_every_order_is_exact_against_pillow(batch: int, threads: int) -> None:
    # all 24 orders of the 4 ops, extreme factors, odd sizes, padding; batch 1 on 2 threads
    # runs the compiled kernel's row-block split
    rng = np.random.default_rng(batch * 10 + threads)
    perms = list(itertools.permutations(range(4)))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for start in range(0, len(perms), batch):
            x, sizes = _odd_padded(rng, batch)
            order = torch.tensor([perms[(start + i) % len(perms)] for i in range(batch)])
            pick = [0.0, 1.0, 2.0, float(rng.uniform(0, 2))]
            f = [torch.tensor([pick[int(rng.integers(4))] for _ in range(batch)]) for _ in range(3)]
            hue = torch.tensor([[-0.5, 0.5, 0.0, float(rng.uniform(-0.5, 0.5))][int(rng.integers(4))]
                                for _ in range(batch)])
            out = F.color_jitter(x, sizes, (0, 1, 2, 3), order, f[0], f[1], f[2], hue)
            for i in range(batch):
                h, w = sizes[i].tolist()
                img = x[i, :, :h, :w].permute(1, 2, 0).numpy()
                for op in order[i].tolist():
                    img = REFERENCE[op](img, float(hue[i]) if op == 3 else float(f[op][i]))
                got = out[i, :, :h, :w].permute(1, 2, 0).numpy()
                assert np.array_equal(got, img), (order[i].tolist(), i)
                assert int(out[i].sum()) == int(out[i, :, :h, :w].sum())  # padding stays 0
    finally:
        torch.set_num_threads(before)
