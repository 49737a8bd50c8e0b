"""RandomAffine, RandomRotation, RandomVerticalFlip: pixels against the Pillow reference,
geometry of every kind against torchvision's maps, replay, the device rules, bad arguments."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import RandomAffine, RandomRotation, RandomVerticalFlip
from npu_data.transforms.oracle.replay import sample_image
from tests.support.batches import keyed_params
from tests.support.device_audit import audit
from tests.support.device_ops import allow_list, collect
from tests.support.geometry import apply_affine, check_ellipses, geometry_batch

B = 8


TRANSFORMS = {
    "affine-nearest": (RandomAffine(40, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(-10, 10,
                                    -5, 5), fill=(9, 99, 199)), 0),
    "affine-bilinear": (RandomAffine((-180, 180), scale=(0.8, 1.2), shear=15,
                                     interpolation="bilinear", fill=3), 1),
    "rotation-nearest": (RandomRotation(90), 0),
    "rotation-bilinear": (RandomRotation((-30, 60), interpolation="bilinear", fill=200), 1),
    "vflip": (RandomVerticalFlip(0.5), 0),
}


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_pixels_match_the_reference_replayed_per_sample(case: str) -> None:
    t, bound = TRANSFORMS[case]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    for i in range(B):
        want = t.reference(sample_image(batch, i), params, i).astype(np.int64)
        got = sample_image(out, i).astype(np.int64)
        assert got.shape == want.shape
        assert int(np.abs(got - want).max()) <= bound, (case, i)


def _tv_forward(size: tuple[int, int], angle: float, translate: list[float], scale: float,
                shear: list[float]) -> np.ndarray:
    """torchvision's ``_get_inverse_affine_matrix(..., inverted=False)``: where its boxes and
    keypoints go (written out here, independently of the library's inverse)."""
    h, w = size
    cx, cy = w * 0.5, h * 0.5
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [x * scale for x in (a, b, 0.0, c, d, 0.0)]
    m[2] += m[0] * (-cx) + m[1] * (-cy) + cx + translate[0]
    m[5] += m[3] * (-cx) + m[4] * (-cy) + cy + translate[1]
    return np.asarray(m).reshape(2, 3)


def _forwards(t: Any, params: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]
              ) -> list[np.ndarray]:
    out = []
    for i in range(B):
        size = tuple(batch["sizes"][i].tolist())
        if isinstance(t, RandomAffine):
            out.append(_tv_forward(size, float(params["angle"][i]),
                                   params["translate"][i].tolist(), float(params["scale"][i]),
                                   params["shear"][i].tolist()))
        elif isinstance(t, RandomRotation):  # torchvision: rotate = affine by -angle
            out.append(_tv_forward(size, -float(params["angle"][i]), [0, 0], 1.0, [0, 0]))
        else:
            h = size[0]
            flip = bool(params["flip"][i])
            out.append(np.array([[1, 0, 0], [0, -1, h]] if flip else [[1, 0, 0], [0, 1, 0]],
                                dtype=np.float64))
    return out


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_geometry_follows_as_torchvision_moves_it(case: str) -> None:
    t, _ = TRANSFORMS[case]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    for i, m in enumerate(_forwards(t, params, batch)):
        h, w = batch["sizes"][i].tolist()
        # keypoints: moved; invalid outside the output
        kp = apply_affine(m, batch["keypoints.xy"][i].double().numpy())
        np.testing.assert_allclose(out["keypoints.xy"][i].numpy(), kp, atol=2e-3)
        inside = (kp[:, 0] >= 0) & (kp[:, 0] <= w) & (kp[:, 1] >= 0) & (kp[:, 1] <= h)
        assert np.array_equal(out["keypoints.valid"][i].numpy(), inside)
        # boxes: the box around the moved corners, clamped to the output (torchvision)
        x0, y0, x1, y1 = batch["boxes.xyxy"][i].double().numpy().T
        corners = np.stack([np.stack(p, -1) for p in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))],
                           1)
        moved = apply_affine(m, corners)
        env = np.concatenate([moved.min(1), moved.max(1)], -1)
        clamped = np.clip(env, 0, [w, h, w, h])
        np.testing.assert_allclose(out["boxes.xyxy"][i].numpy(), clamped, atol=2e-3)
        frac = _area(clamped) / _area(env)
        sure = np.abs(frac - 0.25) > 1e-3
        assert np.array_equal(out["boxes.valid"][i].numpy()[sure], (frac >= 0.25)[sure])
        # polygons: exact, then clamped to the output
        pts = apply_affine(m, batch["polygons.points"][i].double().numpy())
        np.testing.assert_allclose(out["polygons.points"][i].numpy(),
                                   np.clip(pts, 0, [w, h]), atol=2e-3)
        # ellipses: points of the old outline lie on the new one
        check_ellipses(batch["ellipses.params"][i].double().numpy(),
                        out["ellipses.params"][i].double().numpy(), m)


def _area(e: np.ndarray) -> np.ndarray:
    return np.clip(e[:, 2] - e[:, 0], 0, None) * np.clip(e[:, 3] - e[:, 1], 0, None)


@pytest.mark.parametrize("case", ["affine-nearest", "rotation-nearest", "vflip"])
def test_masks_move_with_the_pixels(case: str) -> None:
    """A mask warps as its pixels do under the nearest map: the same parameters on an image
    made of the mask give the same pattern (the fill aside)."""
    t, _ = TRANSFORMS[case]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    h, w = batch["image"].shape[-2:]
    rows = torch.arange(h).view(1, h, 1) < batch["sizes"][:, 0].view(-1, 1, 1)
    cols = torch.arange(w).view(1, 1, w) < batch["sizes"][:, 1].view(-1, 1, 1)
    for k in range(2):
        mask = batch["masks.mask"][:, k] * (rows & cols)
        image = (mask * 255).unsqueeze(1).expand(-1, 3, -1, -1).contiguous()
        ones = torch.ones_like(image) * (rows & cols).unsqueeze(1)
        pixels = t.apply({"image": image, "sizes": batch["sizes"]}, params)["image"]
        covered = t.apply({"image": ones, "sizes": batch["sizes"]}, params)["image"] == 1
        got = out["masks.mask"][:, k]
        assert torch.equal(got * 255, torch.where(covered[:, 0], pixels[:, 0], 0)), k
        assert not (got.bool() & ~covered[:, 0]).any()


def test_rotated_boxes_move_exactly_and_stay_rectangles() -> None:
    t = RandomAffine(60, translate=(0.05, 0.05))
    batch = geometry_batch()
    xywhr = torch.cat([batch["boxes.xyxy"][..., :2], torch.full((B, 3, 2), 6.0),
                       torch.full((B, 3, 1), 20.0)], -1)
    batch = {k: v for k, v in batch.items() if not k.startswith("boxes.xyxy")}
    batch["boxes.xywhr"] = xywhr
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    got = out["boxes.xywhr"].numpy()
    np.testing.assert_allclose(got[..., 2:4], 6.0, atol=1e-3)  # no scale: sizes kept
    # affine angles and box rotations both turn clockwise on screen
    want = 20.0 + params["angle"].numpy()[:, None]
    np.testing.assert_allclose((got[..., 4] - want + 180) % 360 - 180, 0, atol=1e-3)


def test_vertical_flip_reorders_rotated_box_corners() -> None:
    t = RandomVerticalFlip(1.0)
    batch = geometry_batch()
    batch["boxes.xywhr"] = torch.tensor([[[10.0, 5.0, 8.0, 4.0, 0.0]] * 3] * B)
    del batch["boxes.xyxy"]
    out = t.apply(batch, keyed_params(t, batch, 5))
    h = batch["sizes"][:, 0].float()
    got = out["boxes.xywhr"][:, 0]
    # the flipped box's own top-left is its old bottom-left: (10, h - 9), unrotated
    torch.testing.assert_close(got[:, 1], h - 9.0)
    torch.testing.assert_close(got[:, [0, 2, 3, 4]],
                               torch.tensor([[10.0, 8.0, 4.0, 0.0]] * B), atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_replay_is_the_same_whatever_the_batch(case: str) -> None:
    """A sample's parameters and pixels depend on its key alone, not on the batch it is in."""
    t, _ = TRANSFORMS[case]
    batch = geometry_batch()
    whole = t.apply(batch, keyed_params(t, batch, 5))
    for pick in ([3], [5, 1], [0, 2, 4, 6, 7]):
        sub = {k: v[pick] for k, v in batch.items()}
        part = t.apply(sub, keyed_params(t, sub, 5))
        for j, i in enumerate(pick):
            assert np.array_equal(sample_image(part, j), sample_image(whole, i))
            torch.testing.assert_close(part["boxes.xyxy"][j], whole["boxes.xyxy"][i])


def test_the_transforms_keep_the_device_rules() -> None:
    batch = geometry_batch()
    for t, _ in TRANSFORMS.values():
        params = keyed_params(t, batch, 5)
        mode = audit(lambda t=t, params=params: t.apply(batch, params))
        assert not mode.float64, (t, mode.summary())
        assert not set(mode.syncs) - {"Tensor.numpy"}, (t, mode.summary())


def test_bad_arguments_in_one_line() -> None:
    cases = [
        (lambda: RandomAffine(-5), "single degrees value must be >= 0"),
        (lambda: RandomAffine((10, -10)), "min <= max"),
        (lambda: RandomAffine(5, translate=(0.5, 2)), "translate fractions must be in"),
        (lambda: RandomAffine(5, scale=(0, 1)), "0 < min"),
        (lambda: RandomAffine(5, shear=(1, 2, 3)), "shear must be a number or"),
        (lambda: RandomAffine(5, interpolation="cubic"), "'nearest' or 'bilinear'"),
        (lambda: RandomAffine(5, fill=-1), "fill must be an int 0..255"),
        (lambda: RandomAffine("x"), "degrees must be numbers"),
        (lambda: RandomRotation(float("inf")), "finite"),
        (lambda: RandomVerticalFlip(1.5), "probability"),
    ]
    for make, message in cases:
        with pytest.raises(UserError, match=message) as info:
            make()
        assert "\n" not in str(info.value)


@pytest.mark.newest_torch
def test_the_warps_dispatch_only_ops_with_ascend_evidence() -> None:
    """Every aten op the geometric transforms dispatch down the CUDA/NPU path (pixels and
    every geometry group) has a row in docs/device-ops.md, where torch_npu's support is
    recorded."""
    from npu_data.transforms import RandomIoUCrop, RandomZoomOut, ScaleJitter

    batch = geometry_batch()
    cases = {}
    for t in [t for t, _ in TRANSFORMS.values()] + [RandomZoomOut(p=1.0), ScaleJitter(40),
                                                    RandomIoUCrop()]:
        params = keyed_params(t, batch, 5)
        cases[repr(t)] = lambda t=t, params=params: t.apply(batch, params)
    use = collect(cases)
    # host work, no device op: detach (the host parameters read with .numpy() to make the
    # maps) and copy_ (RandomIoUCrop's pick into its host parameters, for a host batch only)
    missing = sorted(set(use.modules) - set(allow_list()) - {"detach", "copy_"})
    assert not missing, {op: sorted(use.modules[op]) for op in missing}
