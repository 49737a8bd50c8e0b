"""The per-sample-order ColorJitter equals applying each sample's ops one by one, in order."""

from __future__ import annotations

import pytest
import torch

from npu_data.transforms import ColorJitter
from npu_data.transforms import functional as F
from npu_data.transforms.color import OPS

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
