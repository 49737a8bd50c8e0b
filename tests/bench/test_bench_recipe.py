"""npu_data/bench/recipe.py runs at tiny sizes, ours' first batch equals its per-sample Pillow
reference (the bench exits non-zero otherwise), and the batch mixing is keyed by the samples;
no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from npu_data.bench import recipe


def test_the_recipe_bench_runs_and_ours_matches_its_reference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert recipe.main(["--quick", "--stages", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "max 0.00 levels, 0.00% of values" in out
    kornia = recipe.kornia_missing() is None  # an optional third row
    assert out.count("img/s (") == 2 + kornia and "ratio" in out
    roof = out.split("ceilings over ")[1].splitlines()[0]  # the row's ceilings and its share
    assert "read" in roof and "decode" in roof and "kernels" in roof and "ours at" in roof
    assert ("ratio to Kornia" in out) == kornia and ("Kornia: not installed" in out) != kornia
    stages = out.split("ours by stage")[1].splitlines()[1:]
    assert len(stages) == 6 and "TrivialAugmentWide" in stages[2] and "MixUp" in stages[5]
    assert all(float(line.split()[0]) >= 0 for line in stages)  # ms, printed to 0.1: a tiny stage reads 0.0


def _batch(index: list[int], classes: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(max(index) + 1, 3, 8, 10, generator=g)[index]
    return {"image": images, "sizes": torch.tensor([[8, 10]] * len(index)),
            "index": torch.tensor(index)}


def test_the_mixing_follows_the_samples_not_their_order() -> None:
    """The same samples in another order (another worker, batch layout or resume) get the same
    mix, partner and label weights; another epoch gets another draw."""
    a = recipe.mix(_batch([3, 9, 4, 12, 5]), 7, seed=1, epoch=0)
    order = [2, 0, 4, 1, 3]
    b = recipe.mix(_batch([[3, 9, 4, 12, 5][k] for k in order]), 7, seed=1, epoch=0)
    assert torch.equal(a["image"][order], b["image"])
    assert torch.equal(a["label"][order], b["label"])
    draws = {recipe.mix(_batch([3, 9, 4, 12, 5]), 7, seed=1, epoch=e)["label"].numpy().tobytes()
             for e in range(6)}
    assert len(draws) > 1


@pytest.mark.parametrize("epoch", range(4))
def test_the_soft_labels_weigh_the_sample_and_its_partner(epoch: int) -> None:
    index = [3, 9, 4, 12, 5, 20]
    label = recipe.mix(_batch(index), 7, seed=0, epoch=epoch)["label"].numpy()
    assert label.shape == (6, 7) and label.dtype == np.float32
    np.testing.assert_allclose(label.sum(1), 1.0, rtol=1e-6)
    own = np.array(index) % 7
    assert (label >= 0).all()
    for row, mine in zip(label, own, strict=True):
        assert (row > 0).sum() <= 2 and (row[mine] > 0 or row.max() == 1.0)


def test_both_mixings_are_chosen_over_batches() -> None:
    """The keyed coin picks MixUp (every value blended) for some batches and CutMix (a box
    copied, the rest untouched) for others."""
    kinds = set()
    for start in range(0, 60, 6):
        batch = _batch(list(range(start, start + 6)))
        out = recipe.mix(batch, 7, seed=0, epoch=0)["image"]
        kinds.add("cutmix" if bool((out == batch["image"]).any()) else "mixup")
    assert kinds == {"cutmix", "mixup"}
