"""MixUp and CutMix (issue 39): soft targets from class ids, pixels mixed with the keyed partner,
the pairing and lam the same for the same samples in any order or batch position, Beta draws
with the right distribution, and one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import CutMix, MixUp
from npu_data.transforms.draws import Draws, sample_keys
from npu_data.transforms.mixing import beta_draws


def _batch(b: int = 8, size: int = 24, dtype: torch.dtype = torch.uint8, seed: int = 0
           ) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (b, 3, size, size), generator=g, dtype=torch.uint8)
    return {"image": image if dtype == torch.uint8 else image.to(dtype) / 255,
            "sizes": torch.tensor([[size, size]] * b),
            "label": torch.randint(0, 10, (b,), generator=g)}


def _keyed(t: Any, batch: dict[str, torch.Tensor], ids: np.ndarray) -> dict[str, torch.Tensor]:
    return t.draw_keyed(batch["sizes"].numpy(), sample_keys(4, 1, ids))


@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_soft_targets_mix_each_label_with_its_partners(cls: type) -> None:
    t = cls(alpha=1.0, num_classes=10)
    batch = _batch()
    params = _keyed(t, batch, np.arange(8))
    out = t.apply(batch, params)
    soft = out["label"]
    assert soft.shape == (8, 10) and soft.dtype == torch.float32
    torch.testing.assert_close(soft.sum(1), torch.ones(8))
    partner, w = params["partner"], params["label_lam"]
    for i in range(8):
        want = torch.zeros(10)
        want[batch["label"][i]] += float(w[i])
        want[batch["label"][partner[i]]] += 1 - float(w[i])
        torch.testing.assert_close(soft[i], want)
    # a permutation: every sample is someone's partner, never its own (b > 1)
    assert sorted(partner.tolist()) == list(range(8))
    assert (partner != torch.arange(8)).all()


def test_mixup_pixels_follow_the_reference() -> None:
    t = MixUp(alpha=0.2, num_classes=10)
    for dtype in (torch.uint8, torch.float32):
        batch = _batch(dtype=dtype, seed=1)
        params = _keyed(t, batch, np.arange(10, 18))
        out = t.apply(batch, params)["image"]
        imgs = [batch["image"][i].permute(1, 2, 0).numpy() for i in range(8)]
        ref = t.mix_reference(imgs, params)
        for i in range(8):
            got = out[i].permute(1, 2, 0).numpy()
            if dtype == torch.uint8:
                np.testing.assert_array_equal(got, ref[i])
            else:
                np.testing.assert_allclose(got, ref[i], rtol=1e-6, atol=1e-6)
    assert len(set(params["lam"].tolist())) == 1  # one lam per batch, as torchvision


def test_cutmix_pastes_one_box_and_weights_labels_by_its_area() -> None:
    t = CutMix(alpha=1.0, num_classes=10)
    batch = _batch(size=32, seed=2)
    params = _keyed(t, batch, np.arange(8))
    out = t.apply(batch, params)
    imgs = [batch["image"][i].permute(1, 2, 0).numpy() for i in range(8)]
    ref = t.mix_reference(imgs, params)
    boxes = params["boxes"]
    assert (boxes == boxes[0]).all()  # one box for samples of one size, as torchvision
    for i in range(8):
        np.testing.assert_array_equal(out["image"][i].permute(1, 2, 0).numpy(), ref[i])
        _, _, h, w = boxes[i].tolist()
        assert float(params["label_lam"][i]) == pytest.approx(1 - h * w / 32 ** 2)


@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_pairing_is_keyed_by_the_samples_not_their_batch_positions(cls: type) -> None:
    """The same samples in another order get the same partners and lam; another epoch's
    draw pairs them differently."""
    t = cls(alpha=1.0, num_classes=10)
    batch = _batch()
    ids = np.arange(50, 58)
    p = _keyed(t, batch, ids)
    perm = np.random.default_rng(0).permutation(8)
    q = _keyed(t, {k: v[perm] for k, v in batch.items()}, ids[perm])
    partner_ids = ids[p["partner"].numpy()]
    assert (ids[perm][q["partner"].numpy()] == partner_ids[perm]).all()
    assert torch.equal(q["label_lam"], p["label_lam"][perm])
    other = t.draw_keyed(batch["sizes"].numpy(), sample_keys(4, 2, ids))
    assert not torch.equal(other["label_lam"], p["label_lam"])


def test_beta_draws_have_the_beta_moments() -> None:
    keys = sample_keys(0, 0, np.arange(40000))
    u = Draws(keys, 0).uniform(2 * 37)
    for alpha in (0.2, 1.0, 2.5):
        lam = beta_draws(u, alpha)
        assert ((lam >= 0) & (lam <= 1)).all()
        var = 1 / (4 * (2 * alpha + 1))  # Beta(a, a): mean 1/2
        assert abs(lam.mean() - 0.5) < 0.01, alpha
        assert abs(lam.var() - var) < 0.05 * var, alpha


def test_the_whole_batch_call_draws_and_replays() -> None:
    t = MixUp(num_classes=10)
    batch = _batch()
    out, params = t.run(batch, torch.Generator().manual_seed(0))
    assert torch.equal(t.apply(batch, params)["image"], out["image"])


@pytest.mark.parametrize("make, match", [
    (lambda: MixUp(alpha=0), "alpha must be a number > 0"),
    (lambda: CutMix(num_classes=0), "num_classes must be an int >= 1"),
    (lambda: MixUp(num_classes=10)(torch.zeros(2, 3, 4, 4, dtype=torch.uint8)),
     "has no 'label' labels"),
    (lambda: MixUp(num_classes=3)(_batch()), r"class ids must lie in 0..2"),
    (lambda: MixUp()(_batch()), "class ids — pass num_classes"),
    (lambda: CutMix(num_classes=10)({**_batch(), "boxes.xyxy": torch.zeros(8, 1, 4)}),
     "cannot be mixed"),
    (lambda: MixUp(num_classes=10).reference(np.zeros((2, 2, 3), np.uint8), {}, 0),
     "replay a batch"),
])
def test_bad_arguments_are_one_line_user_errors(make: Any, match: str) -> None:
    with pytest.raises(UserError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


class _Labelled(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, (int(rng.integers(20, 60)), int(rng.integers(20, 60)),
                                            3), dtype=np.uint8) for _ in range(12)]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.images[i], "index": i, "label": np.int64(i % 5)}


def test_the_classification_recipe_through_the_dataloader() -> None:
    """RandomResizedCrop + TrivialAugmentWide + RandomErasing + CutMix on the loader's batches:
    soft targets out, and the batch's parameters are the ones (seed, epoch, ids) give."""
    from npu_data.loaders import DataLoader
    from npu_data.transforms import (
        Compose,
        RandomErasing,
        RandomResizedCrop,
        TrivialAugmentWide,
        sample_params,
    )

    data = _Labelled()
    pipe = Compose([RandomResizedCrop(32), TrivialAugmentWide(), RandomErasing(0.5),
                    CutMix(num_classes=5)])
    seen = 0
    for batch in DataLoader(data, batch_size=6, shuffle=True, transform=pipe, seed=3):
        assert batch["image"].shape == (6, 3, 32, 32)
        torch.testing.assert_close(batch["label"].sum(1), torch.ones(6))
        ids = batch["index"].numpy()
        again = sample_params(pipe, 3, 0, ids, [data.images[i].shape[:2] for i in ids])
        assert again.keys() == batch["aug"].keys()
        assert all(torch.equal(v, batch["aug"][k]) for k, v in again.items())
        seen += 6
    assert seen == 12


@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
def test_a_batch_mixing_cannot_do_right_is_one_line_naming_the_fix(name: str) -> None:
    """Three labels for four images name the labels (not an argument the user never
    passed); a padded batch of mixed sizes names the fix instead of blending padding."""
    from npu_data import transforms as T

    t = getattr(T, name)(num_classes=3)
    batch = {"image": torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
             "sizes": torch.tensor([[8, 8]] * 4), "label": torch.tensor([0, 1, 2])}
    with pytest.raises(UserError, match="4 images and 3 'label' labels") as err:
        t.run(batch, torch.Generator().manual_seed(0))
    assert "partner" not in str(err.value)
    batch["label"] = torch.tensor([0, 1, 2, 0])
    batch["sizes"] = torch.tensor([[8, 8], [4, 6], [8, 8], [8, 8]])
    with pytest.raises(UserError, match="mixed sizes .*BucketBatchSampler"):
        t.run(batch, torch.Generator().manual_seed(0))
    batch["sizes"] = torch.tensor([[6, 6]] * 4)  # one size, padded: mixed as it is
    out, _ = t.run(batch, torch.Generator().manual_seed(0))
    assert out["label"].shape == (4, 3)
