"""Geometry follows the pixels: boxes, rotated boxes, polygons, keypoints and masks are
transformed with the image and checked against what the transformed pixels show."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from npu_data.transforms import (
    CenterCrop,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    geometry,
)


def _fill_boxes(h: int, w: int, boxes: list[tuple[int, int, int, int]]) -> torch.Tensor:
    """(B, 3, h, w) uint8: white axis-aligned integer box per sample on black."""
    img = torch.zeros(len(boxes), 3, h, w, dtype=torch.uint8)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        img[i, :, y0:y1, x0:x1] = 255
    return img


def _fill_quad(h: int, w: int, corners: np.ndarray) -> np.ndarray:
    """(h, w) bool: pixel centres inside the convex clockwise quad (4, 2)."""
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    inside = np.ones((h, w), dtype=bool)
    for k in range(4):
        (ax, ay), (bx, by) = corners[k], corners[(k + 1) % 4]
        inside &= (bx - ax) * (ys - ay) - (by - ay) * (xs - ax) >= 0
    return inside


def _extent(mask: torch.Tensor) -> tuple[float, float, float, float] | None:
    """Continuous extent x0, y0, x1, y1 of the set pixels of a (H, W) bool mask."""
    rows = torch.nonzero(mask.any(1)).flatten()
    cols = torch.nonzero(mask.any(0)).flatten()
    if rows.numel() == 0:
        return None
    return (float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1))


def test_boxes_and_masks_follow_random_resized_crop_and_flip() -> None:
    h, w, b = 64, 80, 16
    gen = torch.Generator().manual_seed(3)
    boxes = []
    for _ in range(b):
        x0, y0 = (int(v) for v in torch.randint(0, 40, (2,), generator=gen))
        bw, bh = (int(v) for v in torch.randint(8, 24, (2,), generator=gen))
        boxes.append((x0, y0, min(x0 + bw, w), min(y0 + bh, h)))
    image = _fill_boxes(h, w, boxes)
    batch = {
        "image": image,
        "sizes": torch.tensor([[h, w]] * b),
        "boxes.xyxy": torch.tensor(boxes, dtype=torch.float32).view(b, 1, 4),
        "boxes.valid": torch.ones(b, 1, dtype=torch.bool),
        "masks.mask": (image[:, :1] > 0).to(torch.uint8),
        "masks.valid": torch.ones(b, 1, dtype=torch.bool),
        "boxes.label": torch.arange(b).view(b, 1),
    }
    pipe = Compose([RandomResizedCrop(48, scale=(0.3, 1.0), min_visible=0.0),
                    RandomHorizontalFlip()])
    out = pipe(batch, torch.Generator().manual_seed(7))
    assert torch.equal(out["boxes.label"], batch["boxes.label"])  # passes through
    checked = 0
    for i in range(b):
        xyxy = out["boxes.xyxy"][i, 0].tolist()
        lit = _extent(out["image"][i, 0] > 127)
        mask = _extent(out["masks.mask"][i, 0] > 0)
        if not out["boxes.valid"][i, 0]:
            assert lit is None or (lit[2] - lit[0]) * (lit[3] - lit[1]) <= 2
            continue
        if xyxy[2] - xyxy[0] < 2 or xyxy[3] - xyxy[1] < 2:
            continue
        assert lit is not None and mask is not None
        np.testing.assert_allclose(xyxy, lit, atol=1.0)
        np.testing.assert_allclose(xyxy, mask, atol=1.0)
        checked += 1
    assert checked >= b // 2


@pytest.mark.parametrize("scale", [(0.6, 1.0), (0.1, 0.3)])  # mostly whole / mostly cut
def test_rotated_box_envelope_follows_the_pixels(scale: tuple[float, float]) -> None:
    h, w, b = 64, 64, 16
    xywhr = torch.tensor([[20.0, 22.0, 24.0, 14.0, 30.0]]).repeat(b, 1).view(b, 1, 5)
    xywhr[:, 0, 4] = torch.linspace(-40, 40, b)
    corners = geometry.corners_from_xywhr(xywhr)
    image = torch.zeros(b, 3, h, w, dtype=torch.uint8)
    for i in range(b):
        image[i, :, torch.from_numpy(_fill_quad(h, w, corners[i, 0].numpy()))] = 255
    batch = {"image": image, "sizes": torch.tensor([[h, w]] * b), "boxes.corners": corners,
             "boxes.xywhr": xywhr, "boxes.valid": torch.ones(b, 1, dtype=torch.bool)}
    pipe = Compose([RandomResizedCrop(40, scale=scale, min_visible=0.0),
                    RandomHorizontalFlip()])
    out = pipe(batch, torch.Generator().manual_seed(1))
    checked = 0
    for i in range(b):
        lit = _extent(out["image"][i, 0] > 127)
        if not out["boxes.valid"][i, 0]:
            assert lit is None or (lit[2] - lit[0]) * (lit[3] - lit[1]) <= 4
            continue
        x0, y0, x1, y1 = out["boxes.xyxy"][i, 0].tolist()
        if x1 - x0 < 3 or y1 - y0 < 3:
            continue
        assert lit is not None
        checked += 1
        # a rotated corner is a sharp tip: the pixel centres inside it can stop up to one
        # source pixel short of the exact envelope, so allow 1.5 output pixels
        np.testing.assert_allclose(out["boxes.xyxy"][i, 0].tolist(), lit, atol=1.5)
        # uncut boxes: xyxy is the envelope of the transformed corners
        env = geometry.envelope(out["boxes.corners"][i, 0])
        if bool(((env >= 0) & (env <= 40)).all()):
            torch.testing.assert_close(out["boxes.xyxy"][i, 0], env)
        # xywhr agrees with corner 0 and the first edge of the transformed corners
        c = out["boxes.corners"][i, 0]
        r = math.degrees(math.atan2(float(c[1, 1] - c[0, 1]), float(c[1, 0] - c[0, 0])))
        assert abs(float(out["boxes.xywhr"][i, 0, 4]) - r) < 1e-3
    assert checked >= b // 4


def test_hflip_is_exact_within_each_valid_width_and_keeps_corner_order() -> None:
    h, w = 20, 30
    image = _fill_boxes(h, w, [(2, 3, 9, 12), (2, 3, 9, 12)])
    sizes = torch.tensor([[h, w], [h, 17]])  # sample 1 is padded: valid width 17
    xywhr = torch.tensor([[[2.0, 3.0, 7.0, 9.0, 20.0]], [[2.0, 3.0, 7.0, 9.0, 0.0]]])
    batch = {"image": image, "sizes": sizes, "boxes.xyxy": torch.tensor([[[2.0, 3, 9, 12]]] * 2),
             "boxes.xywhr": xywhr, "keypoints.xy": torch.tensor([[[2.5, 3.5]]] * 2),
             "keypoints.valid": torch.ones(2, 1, dtype=torch.bool)}
    flip = RandomHorizontalFlip(p=1.0)
    out = flip(batch)
    for i, valid_w in enumerate((w, 17)):
        x0, y0, x1, y1 = out["boxes.xyxy"][i, 0].tolist()
        assert (x0, y0, x1, y1) == (valid_w - 9, 3, valid_w - 2, 12)
        assert _extent(out["image"][i, 0] > 0) == (x0, y0, x1, y1)
        assert out["keypoints.xy"][i, 0].tolist() == [valid_w - 2.5, 3.5]
    # rotation r becomes -r; width and height are kept; flipping twice is the identity
    torch.testing.assert_close(out["boxes.xywhr"][0, 0, 2:], torch.tensor([7.0, 9.0, -20.0]))
    back = flip(out)
    torch.testing.assert_close(back["boxes.xywhr"], xywhr, atol=1e-4, rtol=0)
    assert torch.equal(back["image"], image)
    assert torch.equal(back["boxes.xyxy"], batch["boxes.xyxy"])


def test_min_visible_drops_boxes_polygons_and_masks_cut_by_the_crop() -> None:
    # CenterCrop(20) of 40x40 keeps [10, 30) x [10, 30): the box [0, 20)^2 keeps 1/4 of its area
    image = torch.zeros(1, 3, 40, 40, dtype=torch.uint8)
    square = torch.tensor([[0.0, 0.0], [20.0, 0.0], [20.0, 20.0], [0.0, 20.0], [1e6, 1e6]])
    mask = torch.zeros(1, 1, 40, 40, dtype=torch.uint8)
    mask[0, 0, :20, :20] = 1
    batch = {"image": image, "sizes": torch.tensor([[40, 40]]),
             "boxes.xyxy": torch.tensor([[[0.0, 0.0, 20.0, 20.0], [12.0, 12.0, 18.0, 18.0]]]),
             "polygons.points": square.view(1, 1, 5, 2),
             "polygons.vertex_valid": torch.tensor([[[True, True, True, True, False]]]),
             "masks.mask": mask}
    for min_visible, kept in ((0.2, True), (0.3, False)):
        out = CenterCrop(20, min_visible=min_visible)(batch)
        assert out["boxes.valid"].tolist() == [[kept, True]]
        assert out["polygons.valid"].tolist() == [[kept]]
        assert out["masks.valid"].tolist() == [[kept]]
        assert out["boxes.xyxy"][0, 0].tolist() == [0.0, 0.0, 10.0, 10.0]
        assert out["boxes.xyxy"][0, 1].tolist() == [2.0, 2.0, 8.0, 8.0]
        assert out["polygons.points"][0, 0, :4].tolist() == [[0, 0], [10, 0], [10, 10], [0, 10]]
        assert int(out["masks.mask"].sum()) == 100


def test_min_visible_defaults_to_torchvisions_keep_everything_left_inside() -> None:
    """torchvision's crops keep a box however little of it is left: the default is 0 (a box
    with nothing inside is still invalid); 0.25, the former default, one argument away."""
    from npu_data.transforms import ScaleJitter

    image = torch.zeros(2, 3, 40, 40, dtype=torch.uint8)
    xyxy = torch.tensor([[[0.0, 0.0, 12.0, 12.0], [0.0, 0.0, 9.0, 9.0]]] * 2)  # 4 %, none
    batch = {"image": image, "sizes": torch.tensor([[40, 40]] * 2), "boxes.xyxy": xyxy}
    for t in (CenterCrop(20), RandomResizedCrop(20, scale=(0.25, 0.25), ratio=(1, 1)),
              ScaleJitter(40)):
        assert t.min_visible == 0.0, t
    out = CenterCrop(20)(batch)
    assert out["boxes.valid"].tolist() == [[True, False]] * 2
    assert out["boxes.xyxy"][0, 0].tolist() == [0.0, 0.0, 2.0, 2.0]
    assert CenterCrop(20, min_visible=0.25)(batch)["boxes.valid"].tolist() == [[False] * 2] * 2
    rrc = RandomResizedCrop(20, scale=(0.25, 0.25), ratio=(1, 1))
    params = {"boxes": torch.tensor([[10, 10, 20, 20]] * 2)}
    assert rrc.apply(batch, params)["boxes.valid"].tolist() == [[True, False]] * 2
    old = RandomResizedCrop(20, scale=(0.25, 0.25), ratio=(1, 1), min_visible=0.25)
    assert old.apply(batch, params)["boxes.valid"].tolist() == [[False] * 2] * 2


def test_keypoints_map_with_the_crop_formula_and_leave_when_outside() -> None:
    gen = torch.Generator().manual_seed(5)
    b, k = 12, 20
    sizes = torch.tensor([[50, 70]] * 6 + [[30, 40]] * 6)
    xy = torch.rand(b, k, 2, generator=gen) * sizes.flip(1).view(b, 1, 2).float()
    batch = {"image": torch.zeros(b, 3, 50, 70, dtype=torch.uint8), "sizes": sizes,
             "keypoints.xy": xy, "keypoints.valid": torch.ones(b, k, dtype=torch.bool)}
    t = RandomResizedCrop((24, 32))
    params = t.get_params(batch, gen)
    out = t.apply(batch, params)
    box = params["boxes"].double().numpy()
    pts = xy.double().numpy()
    ex = (pts[..., 0] - box[:, None, 1]) * 32 / box[:, None, 3]
    ey = (pts[..., 1] - box[:, None, 0]) * 24 / box[:, None, 2]
    np.testing.assert_allclose(out["keypoints.xy"][..., 0].numpy(), ex, atol=1e-3)
    np.testing.assert_allclose(out["keypoints.xy"][..., 1].numpy(), ey, atol=1e-3)
    inside = (ex >= 0) & (ex <= 32) & (ey >= 0) & (ey <= 24)
    assert np.array_equal(out["keypoints.valid"].numpy(), inside)
    assert 0 < inside.sum() < inside.size


def test_keypoint_stays_on_its_pixel_through_an_upscale() -> None:
    image = torch.zeros(1, 3, 10, 10, dtype=torch.uint8)
    image[0, :, 6, 3] = 255  # pixel centre (3.5, 6.5)
    batch = {"image": image, "sizes": torch.tensor([[10, 10]]),
             "keypoints.xy": torch.tensor([[[3.5, 6.5]]])}
    out = Resize((40, 40))(batch)
    x, y = out["keypoints.xy"][0, 0].tolist()
    ys, xs = np.nonzero(out["image"][0, 0].numpy() >= out["image"][0, 0].numpy().max())
    assert abs(x - (xs.mean() + 0.5)) <= 1 and abs(y - (ys.mean() + 0.5)) <= 1
    assert out["keypoints.valid"].tolist() == [[True]]


@pytest.mark.parametrize("channels_last", [False, True])
def test_polygon_envelope_follows_the_pixels(channels_last: bool) -> None:
    h, w = 48, 48
    tri = np.array([[10.0, 8.0], [40.0, 20.0], [14.0, 38.0], [12.0, 30.0]])
    image = torch.zeros(1, 3, h, w, dtype=torch.uint8)
    image[0, :, torch.from_numpy(_fill_quad(h, w, tri))] = 255
    if channels_last:
        image = image.contiguous(memory_format=torch.channels_last)
    batch = {"image": image, "sizes": torch.tensor([[h, w]]),
             "polygons.points": torch.tensor(tri, dtype=torch.float32).view(1, 1, 4, 2),
             "polygons.vertex_valid": torch.ones(1, 1, 4, dtype=torch.bool)}
    out = Resize((24, 36))(batch)
    env = geometry.envelope(out["polygons.points"][0, 0]).tolist()
    lit = _extent(out["image"][0, 0] > 127)
    assert lit is not None
    np.testing.assert_allclose(env, lit, atol=1.5)
    assert out["polygons.valid"].tolist() == [[True]]


def test_upright_corners_are_clipped_like_xyxy_rotated_ones_move_whole() -> None:
    """A crop cuts an upright box's corners where it cuts its envelope (as torchvision clips
    the boxes), through a resized crop and through a warp (the crop RandomIoUCrop makes);
    a rotated box keeps its exact corners."""
    from npu_data.transforms.warp_geometry import Warp

    upright = torch.tensor([[25.0, 5.0], [50.0, 5.0], [50.0, 15.0], [25.0, 15.0]])
    c, s = math.cos(0.3), math.sin(0.3)
    turned = torch.tensor([[20.0, 20.0], [20 + 20 * c, 20 + 20 * s],
                           [20 + 20 * c - 10 * s, 20 + 20 * s + 10 * c],
                           [20 - 10 * s, 20 + 10 * c]])
    corners = torch.stack([upright, turned])[None]  # (1, 2, 4, 2)
    batch = {"image": torch.zeros(1, 3, 40, 40, dtype=torch.uint8),
             "sizes": torch.tensor([[40, 40]]), "boxes.corners": corners,
             "boxes.xyxy": torch.cat([corners.amin(-2), corners.amax(-2)], -1)}
    out = CenterCrop(20)(batch)  # keeps [10, 30) x [10, 30)
    xyxy = out["boxes.xyxy"][0, 0].tolist()
    assert xyxy == [15.0, 0.0, 20.0, 5.0]
    assert out["boxes.corners"][0, 0].tolist() == [[15, 0], [20, 0], [20, 5], [15, 5]]
    torch.testing.assert_close(out["boxes.corners"][0, 1], turned - 10)
    warp = Warp.from_shift(torch.tensor([[10, 10]]), torch.tensor([[40, 40]]),
                           torch.tensor([[20, 20]]), (20, 20), 0.0)
    moved, env, _ = warp.corners(corners, torch.ones(1, 2, dtype=torch.bool))
    assert moved[0, 0].tolist() == [[15, 0], [20, 0], [20, 5], [15, 5]]
    assert env[0, 0].tolist() == xyxy
    torch.testing.assert_close(moved[0, 1], turned - 10)
