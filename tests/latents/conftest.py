"""Tiny random-weight encoders built from configs into a temporary folder
(``npu_data.latents.tiny``), small image datasets, and a float32 latents store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from npu_data.latents.tiny import save_tiny_encoders
from npu_data.shards.importer import import_dataset
from npu_data.tools.sample_data import make_sample_project

BUCKETS = [(64, 64), (48, 80), (80, 48)]  # sides multiples of the VAE's factor 8


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_tiny_encoders(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def pixels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 photos (every sixth portrait) with captions, in shards of 4."""
    root = tmp_path_factory.mktemp("pixels")
    project = make_sample_project(root / "project", n_images=10, width=96, height=64)
    import_dataset(project.export_path, root / "shards", shard_size=4)
    return root / "shards"


def encode_kwargs(models: dict[str, Path], **over: Any) -> dict[str, Any]:
    """``encode_latents`` keywords of the tests' store (float32, CPU, both text encoders)."""
    kw: dict[str, Any] = dict(buckets=BUCKETS, batch_size=3, device="cpu",
                              dtype=torch.float32, shard_size=4,
                              text_encoders=[models["text_encoder"], models["text_encoder_2"]],
                              tokenizers=[models["tokenizer"], models["tokenizer_2"]])
    kw.update(over)
    return kw


@pytest.fixture(scope="session")
def store(models: dict[str, Path], pixels: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Path:
    from npu_data.latents import encode_latents

    out = tmp_path_factory.mktemp("store") / "latents"
    encode_latents(pixels, out, models["vae"], **encode_kwargs(models))
    return out


DESCRIBED = [(128, 192), (192, 128), (96, 96), (256, 256)]  # (height, width) of each photo


@pytest.fixture(scope="session")
def described(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 photos, no annotation, each caption under the task data's ``description`` (a field
    the default caption rule does not read)."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("described")
    tasks = []
    for i, (h, w) in enumerate(DESCRIBED):
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(root / f"p{i}.png")
        tasks.append({"id": i + 1, "data": {"image": f"p{i}.png",
                                            "description": f"photo {'abcd'[i]} of a cat"},
                      "annotations": []})
    (root / "export.json").write_text(json.dumps(tasks))
    import_dataset(root / "export.json", root / "shards")
    return root / "shards"


def encode_args(dataset: Path, models: dict[str, Path], out: Path) -> list[str]:
    """``npu-data encode`` of ``dataset`` with both tiny text encoders, float32, no flip."""
    return ["encode", str(dataset), "--vae", str(models["vae"]), "--out", str(out),
            "--device", "cpu", "--dtype", "float32", "--no-flip", "--batch-size", "4",
            "--text-encoder", str(models["text_encoder"]), "--tokenizer",
            str(models["tokenizer"]), "--text-encoder-2", str(models["text_encoder_2"]),
            "--tokenizer-2", str(models["tokenizer_2"])]


@pytest.fixture(scope="session")
def kohya(described: Path, models: dict[str, Path],
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The store of ``npu-data encode --buckets kohya:256 --caption-field description`` of
    ``described`` and what it printed."""
    import contextlib

    from npu_data import cli

    out = tmp_path_factory.mktemp("kohya") / "store"
    capture = tmp_path_factory.mktemp("said") / "stdout"
    with open(capture, "w") as fh, contextlib.redirect_stdout(fh):
        assert cli.main([*encode_args(described, models, out), "--buckets", "kohya:256",
                         "--caption-field", "description"]) == 0
    return out, capture.read_text()
