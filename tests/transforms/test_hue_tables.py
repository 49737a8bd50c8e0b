"""The hue kernel's small tables are Pillow's HSV conversions exactly, on all 2**24 colours.

``_kernels.tables``: ``hue_in`` gives H and ``max - min`` from the channel differences
(R - B, G - B) alone (a 512 x 512 table instead of 2**24 entries); S depends on
``(max - min, max)`` alone; V is the max. Each claim is checked against Pillow's own
``convert("HSV")`` of an image holding every colour once, and the whole kernel against
Pillow's HSV round trip on every colour for two shifts.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.transforms._kernels import color as K
from npu_data.transforms._kernels.tables import (
    color_tables,
    hue_in_np,
    hue_rgb_np,
    saturation_np,
)


@pytest.fixture(scope="module")
def every_colour() -> tuple[np.ndarray, np.ndarray]:
    """(4096, 4096, 3) uint8 holding each RGB colour once, and Pillow's HSV of it."""
    c = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8)
    rgb = rgb.reshape(4096, 4096, 3)
    return rgb, np.asarray(Image.fromarray(rgb).convert("HSV"))


def test_h_and_range_follow_from_the_channel_differences(every_colour) -> None:
    rgb, hsv = every_colour
    r, g, b = (rgb[..., i].astype(np.int32) for i in range(3))
    table = hue_in_np()
    got = table[r - b + 255, g - b + 255]
    spread = np.maximum(r, np.maximum(g, b)) - np.minimum(r, np.minimum(g, b))
    assert np.array_equal(got // 256, hsv[..., 0])
    assert np.array_equal(got % 256, spread)


def test_the_packed_table_holds_h_range_and_max_of_every_colour(every_colour) -> None:
    """``hue_rgb`` (the hue step's first gather) is ``(H * 256 + max - min) * 256 + max`` of
    each (R, G, B), Pillow's H: the three fields the RGB table is indexed by."""
    rgb, hsv = every_colour
    packed = hue_rgb_np(hue_in_np())[rgb[..., 0], rgb[..., 1], rgb[..., 2]]
    spread = rgb.max(-1).astype(np.int32) - rgb.min(-1)
    assert np.array_equal(packed >> 16, hsv[..., 0])
    assert np.array_equal((packed >> 8) & 255, spread)
    assert np.array_equal(packed & 255, hsv[..., 2])


def test_s_follows_from_range_and_max_and_v_is_the_max(every_colour) -> None:
    rgb, hsv = every_colour
    mx = rgb.max(-1).astype(np.int64)
    spread = mx - rgb.min(-1)
    assert np.array_equal(saturation_np()[spread, mx], hsv[..., 1])
    assert np.array_equal(hsv[..., 2], mx)


@pytest.mark.parametrize("shift", [0, 91])
def test_the_hue_step_is_pillows_round_trip_on_every_colour(every_colour, shift: int) -> None:
    rgb, hsv = every_colour
    shifted = hsv.copy()
    shifted[..., 0] += np.uint8(shift)  # uint8 wraps modulo 256, as torchvision's
    expected = np.asarray(Image.frombytes("HSV", (4096, 4096), shifted.tobytes())
                          .convert("RGB"))
    x = torch.from_numpy(rgb).view(16, 1 << 20, 1, 3).to(torch.int32)  # a batch of 16
    got = K.hue_step(x, torch.full((16,), shift, dtype=torch.int32), color_tables(x.device))
    assert np.array_equal(got.reshape(4096, 4096, 3).numpy(), expected)


def test_the_hue_step_keeps_the_samples_it_skips() -> None:
    x = torch.randint(0, 256, (4, 3, 5, 3), dtype=torch.int32)
    on = torch.tensor([True, False, True, False])
    got = K.hue_step(x, torch.full((4,), 7, dtype=torch.int32), color_tables(x.device), on)
    assert got.dtype == torch.int32 and torch.equal(got[1], x[1]) and torch.equal(got[3], x[3])
    assert not torch.equal(got[0], x[0])
