"""The README's quick start on classification data (no boxes) and torchvision's
classification recipe through the DataLoader: MixUp / CutMix read ``choices.label`` and take
the class count from the dataset's labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.loaders import DataLoader, LabelStudioDataset
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    presets,
)


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory) -> LabelStudioDataset:
    root = tmp_path_factory.mktemp("cls")
    rng = np.random.default_rng(0)
    tasks = []
    for i in range(8):
        name = f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (40 + i, 50, 3), dtype=np.uint8)).save(root / name)
        label = ["cat", "dog", "bird"][i % 3]
        tasks.append({"id": i + 1, "data": {"image": name}, "annotations": [{"id": i + 1,
                      "result": [{"id": f"r{i}", "type": "choices", "from_name": "kind",
                                  "to_name": "image", "value": {"choices": [label]}}]}]})
    export = root / "export.json"
    export.write_text(json.dumps(tasks))
    return LabelStudioDataset(export, cache_dir=root / "cache")


def test_the_quick_start_loop_runs_on_classification_data(classified: LabelStudioDataset
                                                           ) -> None:
    augment = Compose([RandomResizedCrop(24), ColorJitter(0.4, 0.4, 0.4, 0.1),
                       RandomHorizontalFlip()])
    loader = DataLoader(classified, batch_size=4, device="cpu", transform=augment)
    seen = 0
    for batch in loader:
        images = batch["image"]
        assert images.shape == (4, 3, 24, 24)
        assert "boxes.xyxy" not in batch
        labels = batch["choices.label"][:, 0]
        seen += len(labels)
    assert seen == 8


def test_the_classification_recipe_mixes_the_datasets_labels(classified: LabelStudioDataset
                                                             ) -> None:
    recipe = presets.classification(24, auto_augment_policy="ta_wide", random_erase_prob=0.25,
                                    mixup_alpha=0.2, cutmix_alpha=1.0)
    loader = DataLoader(classified, batch_size=4, device="cpu", transform=recipe, seed=1)
    for batch in loader:
        soft = batch["label"]
        assert soft.shape == (4, 3) and soft.dtype == torch.float32
        torch.testing.assert_close(soft.sum(1), torch.ones(4))
        ids = batch["choices.label"][:, 0].long()
        assert (soft[torch.arange(4), ids] > 0).all()  # each keeps a share of its own class
        assert batch["image"].dtype == torch.float32


def test_the_readme_says_the_newest_recipe_figures() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "1.25–1.45×" in readme and "0.07–0.19×" not in readme
    assert 'batch["boxes.xyxy"], batch["boxes.valid"]' in readme
    assert 'if "boxes.xyxy" in batch' in readme
