"""The kinds' geometry is declared data: a layout of ``kinds.geometry`` per padded kind, and
one percent <-> pixels rule for every pixel column."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.kinds import geometry as layouts
from npu_data.kinds.base import Kind, percent_to_pixels, pixels_to_percent
from npu_data.kinds.registry import KINDS, PADDED
from npu_data.transforms import geometry as G

LAYOUT_HOOKS = ("resized_crop", "hflip", "warp", "own_keys", "pad_samples", "pad_columns",
                "pad_empty")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_kinds_declare_their_geometry_and_write_no_hook_of_it(kind: Kind) -> None:
    overridden = [h for h in LAYOUT_HOOKS if getattr(type(kind), h) is not getattr(Kind, h)]
    assert overridden == [], f"{kind.name} writes {overridden}: declare them in its layout"
    assert kind.geometry is None or kind in PADDED  # geometry moves padded (B, N, ...) rows


def test_the_geometric_kinds_have_layouts() -> None:
    got = {k.name: type(k.geometry).__name__ for k in KINDS if k.geometry is not None}
    assert got == {"boxes": "RotatedBoxes", "polygons": "PolygonPoints",
                   "keypoints": "Keypoints", "ellipses": "Ellipses", "masks": "BitMasks"}
    assert all(isinstance(k.geometry, layouts.Geometry) for k in KINDS if k.geometry)


@pytest.mark.parametrize("shape", [(), (2,), (2, 2), (5,)])
def test_percent_and_pixels_are_each_others_inverse(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    a = rng.random((6, *shape)) * 100
    w, h = rng.random(6) * 500 + 1, rng.random(6) * 500 + 1
    px = percent_to_pixels(a, w, h)
    np.testing.assert_allclose(pixels_to_percent(px, w, h), a, rtol=1e-12)
    if shape == (5,):
        np.testing.assert_array_equal(px[:, 4], a[:, 4])  # the angle is no length
        np.testing.assert_allclose(px[:, [0, 2]], a[:, [0, 2]] * w[:, None] / 100)
        np.testing.assert_allclose(px[:, [1, 3]], a[:, [1, 3]] * h[:, None] / 100)
    elif shape:
        np.testing.assert_allclose(px[..., 1], a[..., 1] * h.reshape(6, *[1] * len(shape[:-1]))
                                   / 100)
    else:
        np.testing.assert_allclose(px, a * w / 100)  # a length along x


def test_a_shape_without_a_rule_is_refused() -> None:
    with pytest.raises(NotImplementedError, match=r"\(3,\)"):
        percent_to_pixels(np.zeros((2, 3)), np.ones(2), np.ones(2))


def test_a_layout_moves_only_its_key_and_validity() -> None:
    pts = torch.tensor([[[5.0, 5.0], [50.0, 5.0]]])  # (B=1, N=2, 2)
    batch = {"k.xy": pts, "k.valid": torch.tensor([[True, True]]), "other": torch.ones(1)}
    crop = torch.tensor([[0, 0, 20, 20]])
    kept = layouts.Points("xy").resized_crop("k", batch, crop, (10, 10), 0.25, G)
    clipped = layouts.Keypoints("xy").resized_crop("k", batch, crop, (10, 10), 0.25, G)
    assert set(kept) == set(clipped) == {"k.xy", "k.valid"}
    assert torch.equal(kept["k.xy"], torch.tensor([[[2.5, 2.5], [25.0, 2.5]]]))
    assert kept["k.valid"].tolist() == [[True, True]]  # points move unclipped
    assert clipped["k.valid"].tolist() == [[True, False]]  # a keypoint outside is dropped
    flipped = layouts.Points("xy").hflip("k", batch, torch.tensor([60]), torch.tensor([True]), G)
    assert torch.equal(flipped["k.xy"], torch.tensor([[[55.0, 5.0], [10.0, 5.0]]]))
    assert layouts.Points("points").resized_crop("k", batch, crop, (10, 10), 0.25, G) == {}
