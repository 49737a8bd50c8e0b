"""SanitizeBoundingBoxes: torchvision's rule (min_size, min_area, inside the image) marks
boxes invalid; nothing else changes; a pipeline and a device-free batch keep their rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import Compose, RandomHorizontalFlip, SanitizeBoundingBoxes, ScaleJitter
from npu_data.transforms.draws import sample_keys


def _torchvision_keeps(box: list[float], h: int, w: int, min_size: float,
                       min_area: float) -> bool:
    """``_get_sanitize_bounding_boxes_mask`` (torchvision 0.28, XYXY) for one box."""
    x0, y0, x1, y1 = box
    bw, bh = x1 - x0, y1 - y0
    ok = bw >= min_size and bh >= min_size and min(box) >= 0 and bw * bh >= min_area
    return ok and x0 <= w and x1 <= w and y0 <= h and y1 <= h


def test_the_rule_is_torchvisions_box_by_box() -> None:
    g = torch.Generator().manual_seed(0)
    b, n = 6, 40
    sizes = torch.tensor([[30, 40], [40, 30], [10, 10], [64, 64], [5, 80], [80, 5]])
    xy = torch.rand(b, n, 2, generator=g) * 90 - 10
    wh = torch.rand(b, n, 2, generator=g) * 4
    xyxy = torch.cat([xy, xy + wh], -1)
    xyxy[0, 0] = torch.tensor([1.0, 1.0, 2.0, 2.0])  # exactly 1 x 1: kept
    xyxy[0, 1] = torch.tensor([0.0, 0.0, 40.0, 30.0])  # the whole image: kept
    xyxy[0, 2] = torch.tensor([0.0, 0.0, 40.5, 30.0])  # past the right edge
    xyxy[0, 3] = torch.tensor([4.0, 4.0, 8.58, 4.59])  # 4.58 x 0.59 px
    valid = torch.rand(b, n, generator=g) > 0.2
    for min_size, min_area in ((1, 1), (1.5, 4), (2, 2)):
        t = SanitizeBoundingBoxes(min_size=min_size, min_area=min_area)
        image = torch.zeros(b, 3, 80, 80, dtype=torch.uint8)
        batch = {"image": image, "sizes": sizes, "boxes.xyxy": xyxy, "boxes.valid": valid,
                 "boxes.label": torch.arange(b * n).view(b, n)}
        out = t(batch)
        for i in range(b):
            h, w = sizes[i].tolist()
            for j in range(n):
                want = bool(valid[i, j]) and _torchvision_keeps(xyxy[i, j].tolist(), h, w,
                                                                min_size, min_area)
                assert bool(out["boxes.valid"][i, j]) == want, (min_size, min_area, i, j)
        assert out["image"] is image and out["boxes.xyxy"] is xyxy
        assert out["boxes.label"] is batch["boxes.label"]
    default = SanitizeBoundingBoxes()({"image": image, "sizes": sizes, "boxes.xyxy": xyxy})
    assert default["boxes.valid"][0, :4].tolist() == [True, True, False, False]


def test_a_batch_without_boxes_passes_and_the_pipeline_stays_keyed() -> None:
    image = torch.randint(0, 256, (3, 3, 20, 24), dtype=torch.uint8)
    batch = {"image": image, "sizes": torch.tensor([[20, 24]] * 3), "label": torch.arange(3)}
    assert SanitizeBoundingBoxes()(batch) is not None
    assert SanitizeBoundingBoxes()(image) is image
    pipe = Compose([ScaleJitter((24, 24), scale_range=(0.05, 0.2)), RandomHorizontalFlip(),
                    SanitizeBoundingBoxes()])
    assert pipe.keyed
    xyxy = torch.tensor([[[2.0, 2.0, 6.0, 9.0], [0.0, 0.0, 24.0, 20.0]]] * 3)
    full = dict(batch, **{"boxes.xyxy": xyxy, "boxes.valid": torch.ones(3, 2, dtype=torch.bool)})
    params = pipe.draw_keyed(np.array([[20, 24]] * 3), sample_keys(0, 0, [0, 1, 2]))
    out = pipe.apply(full, params)
    w = out["boxes.xyxy"][..., 2] - out["boxes.xyxy"][..., 0]
    h = out["boxes.xyxy"][..., 3] - out["boxes.xyxy"][..., 1]
    assert torch.equal(out["boxes.valid"], (w >= 1) & (h >= 1) & (w * h >= 1))
    assert not out["boxes.valid"][:, 0].all()  # 4 x 7 px scaled by <= 0.2: under 1 px


def test_bad_arguments_in_one_line() -> None:
    for kwargs in ({"min_size": 0.5}, {"min_area": 0}, {"min_size": float("nan")},
                   {"min_area": True}):
        with pytest.raises(UserError, match="must be a number >= 1") as info:
            SanitizeBoundingBoxes(**kwargs)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
