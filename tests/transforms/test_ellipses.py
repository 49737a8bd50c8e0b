"""Ellipses follow crops and flips: checked against the mapped boundary points."""

from __future__ import annotations

import math

import torch

from npu_data.transforms import RandomHorizontalFlip, RandomResizedCrop
from npu_data.transforms.geometry import hflip_ellipses, resized_crop_ellipses


def boundary(p: torch.Tensor, n: int = 64) -> torch.Tensor:
    """(n, 2) points on ellipse p = (cx, cy, rx, ry, rot°)."""
    t = torch.linspace(0, 2 * math.pi, n, dtype=torch.float64)
    th = math.radians(float(p[4]))
    u, v = float(p[2]) * torch.cos(t), float(p[3]) * torch.sin(t)
    return torch.stack([p[0] + u * math.cos(th) - v * math.sin(th),
                        p[1] + u * math.sin(th) + v * math.cos(th)], dim=1)


def on_ellipse(pts: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Implicit value (1 on the boundary) of points under ellipse p."""
    th = math.radians(float(p[4]))
    dx, dy = pts[:, 0] - p[0], pts[:, 1] - p[1]
    u = dx * math.cos(th) + dy * math.sin(th)
    v = -dx * math.sin(th) + dy * math.cos(th)
    return (u / p[2]) ** 2 + (v / p[3]) ** 2


def test_uneven_scale_of_a_rotated_ellipse_is_exact() -> None:
    params = torch.tensor([[[40.0, 30.0, 20.0, 8.0, 35.0], [5.0, 5.0, 3.0, 2.0, 0.0]]],
                          dtype=torch.float64)
    crop = torch.tensor([[10, 12, 50, 60]])  # top, left, height, width
    out_size = (100, 30)  # y stretched 2x, x squeezed 0.5x
    mapped, valid = resized_crop_ellipses(params, torch.ones(1, 2, dtype=torch.bool), crop,
                                          out_size)
    pts = boundary(params[0, 0])
    pts = torch.stack([(pts[:, 0] - 12) * 30 / 60, (pts[:, 1] - 10) * 100 / 50], dim=1)
    assert torch.allclose(on_ellipse(pts, mapped[0, 0]), torch.ones(len(pts), dtype=torch.float64),
                          atol=1e-9)
    assert valid.tolist() == [[True, False]]  # the second centre (5, 5) is left of the crop


def test_float32_ellipses_are_mapped_in_float32_closely() -> None:
    """The loaders' float32 columns are computed in float32 (no float64 on a device): the
    mapped boundary stays on the mapped ellipse to float32 precision."""
    rng = torch.Generator().manual_seed(0)
    n = 200
    params = torch.stack([torch.rand(n, generator=rng) * 100, torch.rand(n, generator=rng) * 80,
                          1 + torch.rand(n, generator=rng) * 30, 1 + torch.rand(n, generator=rng) * 30,
                          torch.rand(n, generator=rng) * 360 - 180], dim=1).view(1, n, 5)
    crop = torch.tensor([[5, 7, 70, 90]])
    out_size = (64, 120)
    mapped, _ = resized_crop_ellipses(params, torch.ones(1, n, dtype=torch.bool), crop, out_size)
    assert mapped.dtype == torch.float32
    worst = 0.0
    for i in range(n):
        pts = boundary(params[0, i].double())
        pts = torch.stack([(pts[:, 0] - 7) * 120 / 90, (pts[:, 1] - 5) * 64 / 70], dim=1)
        worst = max(worst, float((on_ellipse(pts, mapped[0, i].double()) - 1).abs().max()))
    assert worst < 1e-4, worst


def test_flip_mirrors_centre_and_angle() -> None:
    params = torch.tensor([[[10.0, 20.0, 6.0, 3.0, 30.0]]], dtype=torch.float64)
    out = hflip_ellipses(params, torch.tensor([50]), torch.tensor([True]))
    pts = boundary(params[0, 0])
    mirrored = torch.stack([50 - pts[:, 0], pts[:, 1]], dim=1)
    assert torch.allclose(on_ellipse(mirrored, out[0, 0]), torch.ones(len(pts), dtype=torch.float64),
                          atol=1e-9)


def test_random_transforms_carry_ellipses() -> None:
    g = torch.Generator().manual_seed(3)
    batch = {"image": torch.randint(0, 256, (4, 3, 80, 90), dtype=torch.uint8),
             "sizes": torch.tensor([[80, 90]] * 4),
             "ellipses.params": torch.tensor([[[45.0, 40.0, 10.0, 5.0, 20.0]]] * 4),
             "ellipses.valid": torch.ones(4, 1, dtype=torch.bool)}
    out = RandomHorizontalFlip(1.0)(RandomResizedCrop(32)(batch, generator=g), generator=g)
    assert out["ellipses.params"].shape == (4, 1, 5)
    assert not torch.equal(out["ellipses.params"], batch["ellipses.params"])
    assert out["ellipses.valid"].dtype == torch.bool
