"""The auto-augment policies (issue 39): op tables and magnitude bins equal torchvision 0.29's
definitions (written out below from ``torchvision/transforms/v2/_auto_augment.py``), the same
draw picks the same op and magnitude as torchvision's ``forward``, and batches replay sample by
sample on the Pillow reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import AutoAugment, RandAugment, TrivialAugmentWide
from npu_data.transforms import functional as F
from npu_data.transforms.auto_augment import (
    AUTO_AUGMENT_SPACE,
    IMAGENET_POLICY,
    RAND_AUGMENT_SPACE,
    TRIVIAL_AUGMENT_WIDE_SPACE,
)
from npu_data.transforms.draws import Draws, sample_keys
from tests.support.batches import mixed_levels
from tests.support.device_audit import audit

# --- torchvision 0.29, transforms/v2/_auto_augment.py, as written there -----------------------
TV_RAND_AUGMENT = {
    "Identity": (lambda num_bins, height, width: None, False),
    "ShearX": (lambda num_bins, height, width: torch.linspace(0.0, 0.3, num_bins), True),
    "ShearY": (lambda num_bins, height, width: torch.linspace(0.0, 0.3, num_bins), True),
    "TranslateX": (
        lambda num_bins, height, width: torch.linspace(0.0, 150.0 / 331.0 * width, num_bins),
        True,
    ),
    "TranslateY": (
        lambda num_bins, height, width: torch.linspace(0.0, 150.0 / 331.0 * height, num_bins),
        True,
    ),
    "Rotate": (lambda num_bins, height, width: torch.linspace(0.0, 30.0, num_bins), True),
    "Brightness": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Color": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Contrast": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Sharpness": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Posterize": (
        lambda num_bins, height, width: (
            8 - (torch.arange(num_bins) / ((num_bins - 1) / 4))).round().int(),
        False,
    ),
    "Solarize": (lambda num_bins, height, width: torch.linspace(1.0, 0.0, num_bins), False),
    "AutoContrast": (lambda num_bins, height, width: None, False),
    "Equalize": (lambda num_bins, height, width: None, False),
}
TV_TRIVIAL_AUGMENT_WIDE = {
    "Identity": (lambda num_bins, height, width: None, False),
    "ShearX": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "ShearY": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "TranslateX": (lambda num_bins, height, width: torch.linspace(0.0, 32.0, num_bins), True),
    "TranslateY": (lambda num_bins, height, width: torch.linspace(0.0, 32.0, num_bins), True),
    "Rotate": (lambda num_bins, height, width: torch.linspace(0.0, 135.0, num_bins), True),
    "Brightness": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "Color": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "Contrast": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "Sharpness": (lambda num_bins, height, width: torch.linspace(0.0, 0.99, num_bins), True),
    "Posterize": (
        lambda num_bins, height, width: (
            8 - (torch.arange(num_bins) / ((num_bins - 1) / 6))).round().int(),
        False,
    ),
    "Solarize": (lambda num_bins, height, width: torch.linspace(1.0, 0.0, num_bins), False),
    "AutoContrast": (lambda num_bins, height, width: None, False),
    "Equalize": (lambda num_bins, height, width: None, False),
}
TV_AUTO_AUGMENT = {
    "ShearX": (lambda num_bins, height, width: torch.linspace(0.0, 0.3, num_bins), True),
    "ShearY": (lambda num_bins, height, width: torch.linspace(0.0, 0.3, num_bins), True),
    "TranslateX": (
        lambda num_bins, height, width: torch.linspace(0.0, 150.0 / 331.0 * width, num_bins),
        True,
    ),
    "TranslateY": (
        lambda num_bins, height, width: torch.linspace(0.0, 150.0 / 331.0 * height, num_bins),
        True,
    ),
    "Rotate": (lambda num_bins, height, width: torch.linspace(0.0, 30.0, num_bins), True),
    "Brightness": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Color": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Contrast": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Sharpness": (lambda num_bins, height, width: torch.linspace(0.0, 0.9, num_bins), True),
    "Posterize": (
        lambda num_bins, height, width: (
            8 - (torch.arange(num_bins) / ((num_bins - 1) / 4))).round().int(),
        False,
    ),
    "Solarize": (lambda num_bins, height, width: torch.linspace(1.0, 0.0, num_bins), False),
    "AutoContrast": (lambda num_bins, height, width: None, False),
    "Equalize": (lambda num_bins, height, width: None, False),
    "Invert": (lambda num_bins, height, width: None, False),
}
TV_IMAGENET = [
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
]

_PAIRS = [(RAND_AUGMENT_SPACE, TV_RAND_AUGMENT), (TRIVIAL_AUGMENT_WIDE_SPACE,
                                                    TV_TRIVIAL_AUGMENT_WIDE),
          (AUTO_AUGMENT_SPACE, TV_AUTO_AUGMENT)]


@pytest.mark.parametrize("ours, theirs", _PAIRS, ids=["ra", "ta_wide", "aa"])
def test_op_tables_and_bins_are_torchvisions(ours: dict[str, Any], theirs: dict[str, Any]
                                            ) -> None:
    assert list(ours) == list(theirs)  # the order: randint picks by position
    for op, (fn, signed) in theirs.items():
        assert ours[op][1] == signed, op
        for bins, h, w in ((31, 224, 224), (10, 37, 500), (2, 1, 1), (11, 331, 17)):
            want, got = fn(bins, h, w), ours[op][0](bins, h, w)
            if want is None:
                assert got is None, op
            else:
                assert got.dtype == want.dtype and torch.equal(got, want), (op, bins, h, w)
    assert list(IMAGENET_POLICY) == TV_IMAGENET
    assert set(ours) <= set(F.POLICY_OPS)


def _torchvision_pick(space: dict[str, Any], u_op: float, bin_: int, u_sign: float, bins: int,
                      h: int, w: int) -> tuple[str, float]:
    """torchvision's forward for one op, with its random numbers given."""
    keys = tuple(space)
    op = keys[int(u_op * len(keys))]
    fn, signed = space[op]
    table = fn(bins, h, w)
    if table is None:
        return op, 0.0
    m = float(table[bin_])
    return op, -m if signed and u_sign <= 0.5 else m


def test_the_same_draw_picks_the_same_op_and_magnitude() -> None:
    b = 3000
    rng = np.random.default_rng(0)
    sizes = np.stack([rng.integers(1, 400, b), rng.integers(1, 400, b)], 1)
    keys = sample_keys(3, 1, np.arange(b))
    cases = [(TrivialAugmentWide(), TV_TRIVIAL_AUGMENT_WIDE, 1),
             (RandAugment(num_ops=3, magnitude=13), TV_RAND_AUGMENT, 3)]
    for t, space, steps in cases:
        p = t.make_params(sizes, Draws(keys, 0))
        u = Draws(keys, 0).uniform(3 if steps == 1 else 2 * steps).reshape(b, steps, -1)
        seen = set()
        for i in range(b):
            for j in range(steps):
                if steps == 1:
                    bin_, sign = int(u[i, j, 1] * 31), u[i, j, 2]
                else:
                    bin_, sign = 13, u[i, j, 1]
                op, m = _torchvision_pick(space, u[i, j, 0], bin_, sign, 31, *sizes[i])
                seen.add(op)
                assert F.POLICY_OPS[int(p["op"][i, j])] == op, (t, i, j)
                assert float(p["magnitude"][i, j]) == m, (t, i, j, op)
        assert seen == set(space), t


def test_autoaugment_draw_follows_the_imagenet_policy() -> None:
    b = 2000
    keys = sample_keys(5, 0, np.arange(b))
    sizes = np.full((b, 2), 64)
    p = AutoAugment().make_params(sizes, Draws(keys, 0))
    u = Draws(keys, 0).uniform(5)
    for i in range(b):
        sub = TV_IMAGENET[int(u[i, 0] * 25)]
        for j, (name, prob, bin_) in enumerate(sub):
            want = name if u[i, 1 + 2 * j] <= prob else "Identity"
            assert F.POLICY_OPS[int(p["op"][i, j])] == want
            if want != "Identity" and bin_ is not None:
                _, m = _torchvision_pick({name: TV_AUTO_AUGMENT[name]}, 0.0, bin_,
                                         u[i, 2 + 2 * j], 10, 64, 64)
                assert float(p["magnitude"][i, j]) == m


@pytest.mark.parametrize("t", [TrivialAugmentWide(), RandAugment(num_ops=2, magnitude=20),
                               AutoAugment(), TrivialAugmentWide(pixel_only=True),
                               RandAugment(interpolation="bilinear", fill=(10, 200, 30))],
                         ids=repr)
def test_batches_replay_on_the_reference(t: Any) -> None:
    """Every sample equals torchvision's PIL ops with its drawn ops (nearest and the pixel ops
    exact; a bilinear warp is within one level, which a later enhance op can scale by its
    factor: at most 2 for RandAugment's magnitudes)."""
    imgs, x, sizes = mixed_levels(8, n=24)
    bound = 2 if t.interpolation == "bilinear" else 0
    for seed in range(3):
        params = t.draw_keyed(sizes.numpy(), sample_keys(seed, 0, np.arange(24)))
        out = t.apply({"image": x, "sizes": sizes}, params)["image"]
        for i, img in enumerate(imgs):
            h, w = img.shape[:2]
            got = out[i, :, :h, :w].permute(1, 2, 0).numpy().astype(int)
            ref = t.reference(img, params, i).astype(int)
            assert np.abs(got - ref).max() <= bound, (seed, i, params["op"][i].tolist())


@pytest.mark.parametrize("t", [TrivialAugmentWide(), RandAugment(num_ops=2, magnitude=20),
                               AutoAugment()], ids=repr)
def test_a_policy_pickles_to_the_same_draws_and_bytes(t: Any) -> None:
    """A spawned worker (``augment_on="workers"`` under spawn, torchrun, a macOS host) gets the
    transform pickled: its op tables must pickle, and the copy draw and apply as the original."""
    import pickle

    copy = pickle.loads(pickle.dumps(t))
    _, x, sizes = mixed_levels(8, n=24)
    keys = sample_keys(3, 1, np.arange(24))
    params, again = t.draw_keyed(sizes.numpy(), keys), copy.draw_keyed(sizes.numpy(), keys)
    assert params.keys() == again.keys()
    assert all(torch.equal(params[k], again[k]) for k in params)
    batch = {"image": x, "sizes": sizes}
    assert torch.equal(t.apply(batch, params)["image"], copy.apply(batch, again)["image"])


def test_pixel_only_leaves_out_the_geometric_ops() -> None:
    t = TrivialAugmentWide(pixel_only=True)
    p = t.draw_keyed(np.full((500, 2), 32), sample_keys(0, 0, np.arange(500)))
    names = {F.POLICY_OPS[int(o)] for o in p["op"].flatten()}
    assert names == set(TV_TRIVIAL_AUGMENT_WIDE) - {"ShearX", "ShearY", "TranslateX",
                                                     "TranslateY", "Rotate"}


def test_policy_step_runs_on_the_device_path_without_syncs() -> None:
    from npu_data.transforms._kernels import accelerator_path

    t = TrivialAugmentWide(pixel_only=True)
    _, x, sizes = mixed_levels(9, n=16)
    params = t.draw_keyed(sizes.numpy(), sample_keys(1, 0, np.arange(16)))
    expected = t.apply({"image": x, "sizes": sizes}, params)["image"]
    mode = audit(lambda: t.apply({"image": x, "sizes": sizes}, params))
    assert not mode.float64 and not mode.syncs, mode.summary()
    with accelerator_path():
        assert torch.equal(t.apply({"image": x, "sizes": sizes}, params)["image"], expected)


@pytest.mark.parametrize("make, match", [
    (lambda: RandAugment(magnitude=31), "magnitude must be below num_magnitude_bins=31"),
    (lambda: RandAugment(num_ops=-1), "num_ops must be >= 0"),
    (lambda: RandAugment(num_ops=1.5), "num_ops must be an int"),
    (lambda: TrivialAugmentWide(num_magnitude_bins=1), "num_magnitude_bins must be >= 2"),
    (lambda: TrivialAugmentWide(interpolation="bicubic"), "interpolation must be"),
    (lambda: AutoAugment(policy="cifar10"), "policy must be 'imagenet'"),
    (lambda: AutoAugment(fill=300), "fill must be an int 0..255"),
    (lambda: TrivialAugmentWide(pixel_only="yes"), "pixel_only must be True or False"),
])
def test_bad_arguments_are_one_line_user_errors(make: Any, match: str) -> None:
    with pytest.raises(UserError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


@pytest.mark.newest_torch
@pytest.mark.parametrize("t", [TrivialAugmentWide(pixel_only=True),
                               RandAugment(num_ops=2, pixel_only=True)], ids=repr)
def test_a_pixel_policy_is_traced_whole_by_torch_compile(t: Any) -> None:
    """The policy's steps on host-drawn parameters: one graph (no break), the eager pixels."""
    import torch._dynamo

    from npu_data.transforms._kernels import accelerator_path

    _, x, sizes = mixed_levels(10, n=12)
    params = t.draw_keyed(sizes.numpy(), sample_keys(2, 0, np.arange(12)))

    def fn(image: torch.Tensor, size: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        return t.apply({"image": image, "sizes": size}, p)["image"]

    F.autocontrast(x, sizes)  # the autocontrast table is made eagerly, once
    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(x, sizes, params)
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, sizes, params)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got)
