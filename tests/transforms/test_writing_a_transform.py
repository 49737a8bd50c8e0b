"""docs/architecture.md's "Writing a transform": its code, run as written, works keyed through
the DataLoader (crop at read, a flip, the boxes following), byte for byte on a second run,
sample for sample against its reference, and at 0 levels in ``npu_data.parity.check``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.annotations.images import ImageOptions
from npu_data.loaders import DataLoader
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from npu_data.transforms import ReadCrop, Trait, Transform
from tests.support.compare import same_loader_batch
from tests.support.exports import make_export

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Writing a transform"):]
    section = section[:section.index("\n## ")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("example")
    export = make_export(tmp / "proj", n=10)
    opts = WriteOptions(store="raw", shard_size=5, images=ImageOptions(images_root=tmp / "proj"))
    write_dataset(export, tmp / "raw", opts)
    return tmp / "raw"


@pytest.fixture(scope="module")
def example(store: Path) -> dict[str, Any]:
    """The section's two blocks run in order, ``shards`` the store."""
    namespace: dict[str, Any] = {"shards": str(store)}
    for block in _blocks():
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def test_the_example_is_a_short_transform_on_the_public_api() -> None:
    first, usage = _blocks()
    assert len(first.strip().splitlines()) < 30
    imports = re.findall(r"^from (\S+) import", first + usage, flags=re.M)
    assert imports and all(m in ("npu_data", "npu_data.transforms", "npu_data.parity", "torch")
                           for m in imports), imports
    assert "_" not in "".join(re.findall(r"npu_data\.\w+(?:\.(\w+))?", first + usage))


def test_it_defines_only_contract_names(example: dict[str, Any]) -> None:
    cls = example["RandomInvert"]
    assert issubclass(cls, Transform)
    own = {k for k in vars(cls) if not (k.startswith("__") and k != "__init__")}
    assert own <= {"traits", "make_params", "apply", "reference", "output_size", "__init__"}
    assert cls.traits == frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})
    assert repr(cls(0.3)) == "RandomInvert(p=0.3)" and repr(cls()) == "RandomInvert()"
    images = torch.randint(0, 256, (3, 3, 5, 7), dtype=torch.uint8)
    out = cls(1.0).apply(images, {"invert": torch.ones(3, dtype=torch.bool)})  # bare tensors
    assert torch.equal(out, 255 - images)


def test_it_runs_keyed_through_the_loader_with_crop_at_read(example: dict[str, Any],
                                                             store: Path) -> None:
    pipeline = example["pipeline"]
    assert ReadCrop.of(pipeline) is not None  # the reader applies the leading crop
    ds = ShardDataset(store)

    def batches(**kw: Any) -> list[dict[str, Any]]:
        loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0, transform=pipeline, **kw)
        return [b for _ in range(2) for b in loader]  # two epochs: new draws in the second

    first, again, after = batches(), batches(), batches(read_crop=False)
    assert len(first) == len(again) == len(after) == 6
    for a, b, c in zip(first, again, after, strict=True):
        same_loader_batch(a, b)  # byte-identical on a second run
        same_loader_batch(a, c)  # the crop at read is the crop after read
    inverted = flipped = kept = 0
    for batch in first:
        aug = batch["aug"]
        inverted += int(aug["1.invert"].sum())
        flipped += int(aug["2.flip"].sum())
        for j, i in enumerate(batch["index"].tolist()):
            want = pipeline.reference(np.asarray(ds[i]["image"]), aug, j)
            h, w = (int(v) for v in batch["sizes"][j])
            got = batch["image"][j, :, :h, :w].permute(1, 2, 0).numpy()
            assert np.array_equal(want, got), i
        boxes, valid = batch["boxes.xyxy"], batch["boxes.valid"]  # cropped and mirrored
        assert boxes.shape[0] == len(batch["index"])
        assert bool((boxes[valid] >= 0).all()) and bool((boxes[valid] <= 64).all())
        kept += int(valid.sum())
    assert 0 < inverted < 20 and 0 < flipped < 20 and kept > 0  # every branch ran


def test_its_parity_is_zero_levels(example: dict[str, Any]) -> None:
    from npu_data.parity import check

    for t in (example["pipeline"], example["RandomInvert"](0.5)):
        row = check(t)
        assert row.passed and row.max == 0 and row.samples == 16, row


@pytest.mark.slow
def test_the_command_it_shows_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The section's ``npu-data parity --transform`` line, run as written (on the CPU, one
    small batch) on its class saved under the file name the line gives."""
    import shlex

    from npu_data.cli import main

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Writing a transform"):]
    section = section[:section.index("\n## ")]
    (line,) = re.findall(r"```console\n(npu-data parity .*?)\n```", section)
    argv = shlex.split(line)
    spec = argv[argv.index("--transform") + 1]
    (tmp_path / spec.split(":")[0]).write_text(_blocks()[0], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = main([*argv[1:], "--device", "cpu", "--batches", "1", "--batch-size", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    for row in ("RandomInvert()", "RandomInvert() + crop, flip",
                "RandomInvert() loader, crop at read", "RandomInvert() loader, after read",
                "RandomInvert() geometry"):  # the rows the section names, each exact
        assert re.search(rf"^{re.escape(row)}\s+0\s+0\s+0\.000%\s+exact\s+PASS$", out, re.M), (
            row, out)
