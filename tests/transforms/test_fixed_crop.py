"""FixedSizeCrop: torchvision's detection crop-and-pad (one draw for both axes), exact pixels
against Pillow, boxes shifted, clipped and dropped when nothing is left."""

from __future__ import annotations

import numpy as np
import torch

from npu_data.transforms import Compose, FixedSizeCrop, ScaleJitter
from npu_data.transforms.oracle.replay import sample_image
from tests.support.batches import keyed_params
from tests.support.device_audit import audit
from tests.support.geometry import geometry_batch


class _Fixed:
    def __init__(self, u: np.ndarray) -> None:
        self.u = u

    def __len__(self) -> int:
        return len(self.u)

    def uniform(self, n: int) -> np.ndarray:
        return self.u[:, None]


def test_the_place_is_torchvisions_one_draw_for_both_axes() -> None:
    u = torch.rand(500, generator=torch.Generator().manual_seed(0))
    sizes = np.array([[60, 100], [20, 20], [300, 40], [33, 77]] * 125)
    t = FixedSizeCrop((32, 48))
    got = t.make_params(sizes, _Fixed(u.double().numpy()))["offset"]
    for i in range(len(sizes)):
        h, w = (int(v) for v in sizes[i])
        r = u[i:i + 1]
        want = [int(max(h - 32, 0) * r), int(max(w - 48, 0) * r)]  # torchvision's arithmetic
        assert got[i].tolist() == want, (h, w, float(r))


def test_pixels_are_crop_then_pad_exactly_and_boxes_follow() -> None:
    t = FixedSizeCrop((30, 44), fill=(123, 117, 104))
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    assert out["image"].shape[2:] == (30, 44) and out["sizes"].tolist() == [[30, 44]] * 8
    for i in range(8):
        want = t.reference(sample_image(batch, i), params, i)
        assert np.array_equal(sample_image(out, i), want), i
        h, w = batch["sizes"][i].tolist()
        top, left = params["offset"][i].tolist()
        ch, cw = min(h, 30), min(w, 44)
        assert (want[ch:] == (123, 117, 104)).all() and (want[:, cw:] == (123, 117, 104)).all()
        boxes = batch["boxes.xyxy"][i] - torch.tensor([left, top, left, top])
        clipped = torch.stack([boxes[:, 0].clamp(0, cw), boxes[:, 1].clamp(0, ch),
                               boxes[:, 2].clamp(0, cw), boxes[:, 3].clamp(0, ch)], 1)
        keep = (clipped[:, 0] < clipped[:, 2]) & (clipped[:, 1] < clipped[:, 3])
        torch.testing.assert_close(out["boxes.xyxy"][i][keep], clipped[keep])
        assert torch.equal(out["boxes.valid"][i], keep)


def test_lsj_chain_in_a_keyed_compose() -> None:
    pipe = Compose([ScaleJitter((40, 40)), FixedSizeCrop(40, fill=(123, 117, 104))])
    batch = geometry_batch()
    params = keyed_params(pipe, batch, 5)
    out = pipe.apply(batch, params)
    assert out["image"].shape[2:] == (40, 40)
    for i in range(8):
        want = pipe.reference(sample_image(batch, i), params, i)
        assert np.array_equal(sample_image(out, i), want)


def test_fixed_crop_and_sanitize_keep_the_device_rules() -> None:
    from npu_data.transforms import SanitizeBoundingBoxes

    batch = geometry_batch()
    for t in (FixedSizeCrop((30, 44), fill=(1, 2, 3)), SanitizeBoundingBoxes(),
              ScaleJitter(40)):
        params = keyed_params(t, batch, 5)
        mode = audit(lambda t=t, params=params: t.apply(batch, params))
        assert not mode.float64, (t, mode.summary())
        assert not set(mode.syncs) - {"Tensor.numpy"}, (t, mode.summary())
