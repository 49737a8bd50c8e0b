"""Tiny random-weight encoders built from configs into a temporary folder
(``npu_data.latents.tiny``), small image datasets, and a float32 latents store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_data.latents.tiny import save_tiny_encoders
from npu_data.shards.importer import import_dataset
from npu_data.tools.sample_data import make_sample_project
from tests.support.latents import DESCRIBED, encode_args, encode_kwargs


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


@pytest.fixture(scope="session")
def store(models: dict[str, Path], pixels: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Path:
    from npu_data.latents import encode_latents

    out = tmp_path_factory.mktemp("store") / "latents"
    encode_latents(pixels, out, models["vae"], **encode_kwargs(models))
    return out


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
