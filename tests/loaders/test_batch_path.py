"""The path of one batch stays short (``npu_data.bench.batch_path``): one ``ShardDataset``
batch through a keyed RandomResizedCrop + ColorJitter + flip, in process, raw and encoded.
The leading crop is drawn once per batch (the request carries it to the reader and the rest
of the pipeline), the loaders call two transforms functions (the request drawn, the rest run
after the read; the crop at read is the readers'), and the batch runs in few modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_data.bench.batch_path import CROP_DRAW, one_batch
from npu_data.common.compat import TORCH

# ceilings of the path (docs/architecture.md "The path of a batch"); before torch 2.3 there is
# no torch.compiler.is_compiling, and the kernels' compile check goes through common.compat
MODULES = 30 if TORCH >= (2, 3) else 31
CROSS_PACKAGE_CALLS = 300
LOADERS_TRANSFORMS_CALLS = 2  # Pipeline.draw, Pipeline.finish: once each
TRANSFORMS_FUNCTIONS = {"npu_data.transforms.pipeline:Pipeline.draw",
                        "npu_data.transforms.pipeline:Pipeline.finish"}


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_one_batch_takes_a_short_path(tmp_path: Path, store: str) -> None:
    summary = one_batch(tmp_path, store).summary()
    assert summary["watched"].get(CROP_DRAW, 0) == 1  # the crop drawn once, not per reader
    assert summary["loaders_transforms_calls"] <= LOADERS_TRANSFORMS_CALLS, \
        summary["loaders_transforms_edges"]
    # the loaders call at most two transforms functions per batch: these two
    assert summary["loaders_transforms_functions"] <= 2, summary
    assert set(summary["loaders_transforms_function_names"]) == TRANSFORMS_FUNCTIONS
    assert summary["cross_package_calls"] <= CROSS_PACKAGE_CALLS, summary["crossings"]
    assert summary["modules"] <= MODULES, summary["module_names"]
    names = summary["module_names"]
    assert "npu_data.loaders.request" in names and "npu_data.loaders.assemble" in names
    assert "npu_data.readers.read_crop" in names  # the crop at read: the readers' code
    assert not any(n.startswith("npu_data.loaders.crop") for n in names)
