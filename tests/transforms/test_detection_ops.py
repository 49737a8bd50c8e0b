"""RandomZoomOut and ScaleJitter: exact pixels against the Pillow reference, geometry moved
with them, drawn output sizes through Compose, replay, bad arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import Compose, RandomAffine, RandomZoomOut, ScaleJitter
from npu_data.transforms.draws import sample_keys
from npu_data.transforms.oracle.replay import sample_image
from tests.support.batches import keyed_params
from tests.support.device_audit import audit
from tests.support.geometry import check_ellipses, geometry_batch

B = 8
TRANSFORMS: dict[str, Any] = {
    "zoom-out": RandomZoomOut(fill=(1, 2, 250), side_range=(1.0, 2.5), p=0.7),
    "scale-jitter": ScaleJitter((40, 56), scale_range=(0.3, 1.8)),
}


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_pixels_are_the_reference_exactly(case: str) -> None:
    t = TRANSFORMS[case]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    assert torch.equal(out["sizes"], params["out"])
    assert tuple(out["image"].shape[2:]) == tuple(params["out"].max(0).values.tolist())
    for i in range(B):
        want = t.reference(sample_image(batch, i), params, i)
        assert np.array_equal(sample_image(out, i), want), (case, i)
        h, w = params["out"][i].tolist()
        assert not out["image"][i, :, h:].any() and not out["image"][i, :, :, w:].any()


def test_zoom_out_moves_geometry_by_its_offset() -> None:
    t = TRANSFORMS["zoom-out"]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    shift = params["offset"].flip(-1).float()  # (left, top) as (x, y)
    torch.testing.assert_close(out["keypoints.xy"], batch["keypoints.xy"] + shift[:, None])
    torch.testing.assert_close(out["boxes.xyxy"], batch["boxes.xyxy"] + shift.repeat(1, 2)[:, None])
    assert out["boxes.valid"].all() and out["keypoints.valid"].all()
    top, left = params["offset"][:, 0], params["offset"][:, 1]
    for i in range(B):
        h, w = batch["sizes"][i].tolist()
        moved = out["masks.mask"][i, :, top[i]:top[i] + h, left[i]:left[i] + w]
        assert torch.equal(moved, batch["masks.mask"][i, :, :h, :w])
        assert int(out["masks.mask"][i].sum()) == int(moved.sum())


def test_scale_jitter_scales_geometry() -> None:
    t = TRANSFORMS["scale-jitter"]
    batch = geometry_batch()
    params = keyed_params(t, batch, 5)
    out = t.apply(batch, params)
    f = (params["out"].float() / batch["sizes"].float()).flip(-1)  # (sx, sy)
    torch.testing.assert_close(out["polygons.points"],
                               batch["polygons.points"] * f[:, None, None], atol=1e-3, rtol=0)
    for i in range(B):  # the old outline, scaled, lies on the new one
        m = np.diag([float(f[i, 0]), float(f[i, 1])])
        check_ellipses(batch["ellipses.params"][i].double().numpy(),
                        out["ellipses.params"][i].double().numpy(),
                        np.concatenate([m, np.zeros((2, 1))], 1))


def test_drawn_sizes_feed_the_next_draw_in_compose() -> None:
    """Compose draws the next transform for the sizes this one outputs: RandomAffine's
    centre is the zoomed-out canvas's."""
    pipe = Compose([RandomZoomOut(p=1.0, side_range=(2.0, 3.0)), RandomAffine(10)])
    batch = geometry_batch()
    keys = sample_keys(1, 0, batch["index"].numpy())
    params = pipe.draw_keyed(batch["sizes"].numpy(), keys)
    assert torch.equal(params["1.sizes"], params["0.out"])
    out = pipe.apply(batch, params)
    for i in range(B):
        want = pipe.reference(sample_image(batch, i), params, i)
        assert np.array_equal(sample_image(out, i), want)
    with pytest.raises(UserError, match="draw the parameters"):
        RandomZoomOut().output_size(batch["sizes"].numpy(), None)
    zoom = RandomZoomOut(p=1.0, side_range=(2.0, 3.0))
    drawn = zoom.draw_keyed(batch["sizes"].numpy(), keys)
    assert np.array_equal(zoom.output_size(batch["sizes"].numpy(), drawn), drawn["out"].numpy())


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_replay_is_the_same_whatever_the_batch(case: str) -> None:
    t = TRANSFORMS[case]
    batch = geometry_batch()
    whole = t.apply(batch, keyed_params(t, batch, 5))
    for pick in ([6], [2, 0, 5]):
        sub = {k: v[pick] for k, v in batch.items()}
        part = t.apply(sub, keyed_params(t, sub, 5))
        for j, i in enumerate(pick):
            assert np.array_equal(sample_image(part, j), sample_image(whole, i))
            torch.testing.assert_close(part["keypoints.xy"][j], whole["keypoints.xy"][i])


def test_the_transforms_keep_the_device_rules() -> None:
    batch = geometry_batch()
    for t in TRANSFORMS.values():
        params = keyed_params(t, batch, 5)
        mode = audit(lambda t=t, params=params: t.apply(batch, params))
        assert not mode.float64, (t, mode.summary())
        assert not set(mode.syncs) - {"Tensor.numpy"}, (t, mode.summary())


def test_bad_arguments_in_one_line() -> None:
    cases = [
        (lambda: RandomZoomOut(side_range=(0.5, 2)), "1 <= min"),
        (lambda: RandomZoomOut(p=2), "probability"),
        (lambda: RandomZoomOut(fill=(1, 2)), "fill"),
        (lambda: ScaleJitter(0), "target_size must be positive"),
        (lambda: ScaleJitter(64, scale_range=(0, 1)), "0 < min"),
        (lambda: ScaleJitter(64, scale_range=(2, 1)), "min <= max"),
    ]
    for make, message in cases:
        with pytest.raises(UserError, match=message) as info:
            make()
        assert "\n" not in str(info.value)


class _Fixed:
    """Uniforms that hand out given numbers (one column per call)."""

    def __init__(self, u: np.ndarray) -> None:
        self.u = u

    def __len__(self) -> int:
        return len(self.u)

    def uniform(self, n: int) -> np.ndarray:
        assert n == 1
        return self.u[:, None]


def test_scale_jitter_reads_target_size_as_torchvision() -> None:
    """torchvision's ``make_params`` written out in torch (float32, its axes): the same
    uniform gives the same size, for a non-square target too."""
    u = torch.rand(600, generator=torch.Generator().manual_seed(3))
    sizes = np.array([[60, 100], [100, 60], [333, 517], [17, 900]] * 150, np.int64)
    for target, scale_range in (((96, 160), (0.1, 2.0)), ((1024, 1024), (0.3, 1.7)),
                                ((50, 70), (1.0, 1.0))):
        t = ScaleJitter(target, scale_range=scale_range)
        got = t.make_params(sizes, _Fixed(u.double().numpy()))["out"]
        for i in range(len(sizes)):
            h, w = (int(v) for v in sizes[i])
            scale = scale_range[0] + u[i:i + 1] * (scale_range[1] - scale_range[0])
            r = min(target[1] / h, target[0] / w) * scale
            want = (max(int(h * r), 1), max(int(w * r), 1))
            assert tuple(got[i].tolist()) == want, (target, h, w, float(u[i]))
    one = ScaleJitter((96, 160), scale_range=(1.0, 1.0)).make_params(
        np.array([[60, 100]]), _Fixed(np.zeros(1)))
    assert one["out"].tolist() == [[57, 96]]  # min(160 / 60, 96 / 100); swapped: (96, 160)


def test_scale_jitter_resizes_masks_as_torchvision_or_as_pillow() -> None:
    """``masks="torch"`` (the default): torch's nearest, what torchvision's mask resize runs;
    ``masks="pillow"``: Pillow's centre-aligned nearest. Both 0 outside each sample."""
    from PIL import Image

    batch = geometry_batch()
    differ = 0
    for rule in ("torch", "pillow"):
        t = ScaleJitter((40, 56), scale_range=(0.3, 1.8), masks=rule)
        params = keyed_params(t, batch, 5)
        out = t.apply(batch, params)
        for i in range(B):
            h, w = batch["sizes"][i].tolist()
            nh, nw = params["out"][i].tolist()
            src = batch["masks.mask"][i, :, :h, :w]
            if rule == "torch":
                want = torch.nn.functional.interpolate(src[None].float(), size=(nh, nw),
                                                       mode="nearest")[0].to(torch.uint8)
                pil = np.stack([np.asarray(Image.fromarray(m.numpy()).resize(
                    (nw, nh), Image.Resampling.NEAREST)) for m in src])
                differ += int(not np.array_equal(pil, want.numpy()))
            else:
                want = torch.from_numpy(np.stack([np.asarray(Image.fromarray(m.numpy()).resize(
                    (nw, nh), Image.Resampling.NEAREST)) for m in src]))
            assert torch.equal(out["masks.mask"][i, :, :nh, :nw], want), (rule, i)
            assert not out["masks.mask"][i, :, nh:].any() and not out["masks.mask"][i, :, :, nw:].any()
    assert differ > 0  # the two rules are not the same rule
    with pytest.raises(UserError, match="masks must be"):
        ScaleJitter(64, masks="bilinear")
