"""Caption transforms (issue 31): dropout for classifier-free guidance, one of several."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import CaptionDropout, Compose, Normalize, RandomCaption
from npu_data.transforms.draws import sample_keys


class _Dataset:
    controls = ["caption", "note", "cls"]
    labels = {"caption": [], "note": [], "cls": ["cool", "warm", "neutral"]}


def _batch(b: int = 4) -> dict[str, object]:
    return {
        "image": torch.zeros((b, 3, 2, 2), dtype=torch.uint8),
        "sizes": torch.full((b, 2), 2, dtype=torch.int64),
        "caption": [f"first {i}" for i in range(b)],
        "texts.text": [[f"first {i}", f"note {i}", f"second {i}"] for i in range(b - 1)] + [[]],
        "texts.control": [np.array([0, 1, 0]) for _ in range(b - 1)] + [np.zeros(0, int)],
        "choices.label": torch.tensor([[0, 2], [1, -1], [2, -1], [-1, -1]])[:b],
        "choices.control": torch.tensor([[2, 2], [2, -1], [2, -1], [-1, -1]])[:b],
        "choices.valid": torch.tensor([[True, True], [True, False], [True, False],
                                       [False, False]])[:b],
    }


def test_caption_dropout_rate_and_keys() -> None:
    t = CaptionDropout(0.1)
    keys = sample_keys(3, 0, np.arange(20000))
    drop = t.draw_keyed(np.zeros((20000, 2), np.int64), keys)["drop"].numpy()
    assert 0.09 < drop.mean() < 0.11
    again = t.draw_keyed(np.zeros((20000, 2), np.int64), keys)["drop"].numpy()
    assert np.array_equal(drop, again)  # keyed by (seed, epoch, sample)
    other = t.draw_keyed(np.zeros((20000, 2), np.int64), sample_keys(3, 1, np.arange(20000)))
    assert not np.array_equal(drop, other["drop"].numpy())  # a new epoch, new draws
    batch = _batch()
    out = t.apply(batch, {"drop": torch.tensor([True, False, True, False])})
    assert out["caption"] == ["", "first 1", "", "first 3"]
    assert batch["caption"][0] == "first 0"  # the input is left as it was
    assert CaptionDropout(1.0)(batch)["caption"] == [""] * 4
    with pytest.raises(UserError):
        CaptionDropout(1.5)
    with pytest.raises(UserError, match="caption"):
        CaptionDropout(0.5).apply({"image": batch["image"]}, {"drop": torch.zeros(4, dtype=bool)})


def test_random_caption_of_a_control_and_of_choices() -> None:
    batch = _batch()
    t = RandomCaption(control="caption", dataset=_Dataset())
    seen = set()
    for u in np.linspace(0, 0.999, 7):
        out = t.apply(batch, {"pick": torch.full((4,), float(u), dtype=torch.float64)})
        assert out["caption"][3] == "first 3"  # nothing to choose from: kept
        assert out["caption"][0] in ("first 0", "second 0")  # never the per-region note
        seen.add(out["caption"][0])
    assert seen == {"first 0", "second 0"}
    every = RandomCaption().apply(batch, {"pick": torch.full((4,), 0.5)})
    assert every["caption"][:3] == ["note 0", "note 1", "note 2"]
    choices = RandomCaption("choices.label", control="cls", dataset=_Dataset())
    out = choices.apply(batch, {"pick": torch.tensor([0.9, 0.1, 0.1, 0.5])})
    assert out["caption"] == ["neutral", "warm", "neutral", "first 3"]
    with pytest.raises(UserError, match="dataset"):
        RandomCaption("choices.label")
    with pytest.raises(UserError, match="controls"):
        RandomCaption(control="title", dataset=_Dataset())


def test_caption_transforms_run_after_normalize_in_a_keyed_pipeline() -> None:
    pipe = Compose([Normalize(0.5, 0.5), RandomCaption(), CaptionDropout(0.5)])
    assert pipe.keyed
    batch = _batch()
    params = pipe.draw_keyed(np.full((4, 2), 2), sample_keys(0, 0, np.arange(4)))
    out = pipe.apply(batch, params)
    assert out["image"].dtype == torch.float32 and len(out["caption"]) == 4
