"""Adding a kind is one module and one registry line: the documented ``lines`` kind, added to
a copy of the package, goes from a Label Studio export through the parser, the shards, the
reader, collate and the geometry without any other change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import npu_data
from tests.support.docs import worked_example_code

PACKAGE = Path(npu_data.__file__).parent

SCRIPT = r'''
import json, sys
from pathlib import Path
import numpy as np
import torch
from PIL import Image
from npu_data.annotations.images import ImageOptions
from npu_data.kinds.registry import KINDS
from npu_data.loaders import collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from npu_data.transforms import geometry

root = Path(sys.argv[1])
Image.new("RGB", (40, 20)).save(root / "a.png")
line = {"id": "l1", "from_name": "line", "to_name": "image", "type": "linelabels",
        "original_width": 40, "original_height": 20,
        "value": {"points": [[10, 50], [50, 100]], "linelabels": ["edge"]}}
bad = {**line, "id": "l2", "value": {"points": [[1, 2]], "linelabels": ["edge"]}}
tasks = [{"id": 1, "data": {"image": "a.png"}, "annotations": [{"id": 1, "result": [line]}]},
         {"id": 2, "data": {"image": "a.png"}, "annotations": [{"id": 2, "result": [bad]}]}]
(root / "export.json").write_text(json.dumps(tasks))
summary = write_dataset(root / "export.json", root / "out",
                        WriteOptions(images=ImageOptions(images_root=root)))
ds = ShardDataset(root / "out")
batch = collate_samples(ds.__getitems__([0]))
crop = geometry.resized_crop_geometry(batch, torch.tensor([[0, 0, 20, 40]]), (10, 20))
from npu_data.cli import main
from npu_data.formats.webdataset import wds_to_table
from npu_data.formats.webdataset.stream import WebDatasetStream
from npu_data.previews.canvas import draw_sample
assert main(["export-wds", str(root / "out"), "--out", str(root / "w-%06d.tar")]) == 0
streamed = list(WebDatasetStream([str(root / "w-000000.tar")], rank=0, world_size=1))
ref = ds[0]
wds = {"keys": sorted(streamed[0]) == sorted(ref),
       "points": streamed[0]["lines.points"].tobytes() == ref["lines.points"].tobytes(),
       "table": wds_to_table([str(root / "w-000000.tar")], root / "media").columns["lines.points"].tolist()}
plain = draw_sample({**ref, "lines.points": ref["lines.points"][:0]}, ds.labels, ds.controls)
drawn = int((np.asarray(draw_sample(ref, ds.labels, ds.controls), np.int16)
             != np.asarray(plain, np.int16)).sum())
print(json.dumps({
    "kinds": [k.name for k in KINDS][-1], "ds_kinds": [k.name for k in ds.kinds],
    "rejected": summary.rejected, "sample": ds[0]["lines.points"].tolist(),
    "keys": sorted(batch), "shape": list(batch["lines.points"].shape),
    "crop": crop["lines.points"].tolist(), "label": ds.labels["line"],
    "wds": wds, "drawn": drawn,
}))
'''


@pytest.mark.slow
def test_a_new_kind_is_one_module_and_one_registry_line(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg" / "npu_data"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "kinds" / "lines.py").write_text(worked_example_code(), encoding="utf-8")
    registry = pkg / "kinds" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    text = text.replace("    keypoints,\n", "    keypoints,\n    lines,\n", 1)
    text = text.replace("    relations.KIND,\n)", "    relations.KIND,\n    lines.KIND,\n)", 1)
    registry.write_text(text, encoding="utf-8")
    (tmp_path / "work").mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pkg"), "NPU_DATA_QUIET": "1"}
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path / "work")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["kinds"] == "lines" and got["ds_kinds"] == ["lines"]
    assert got["rejected"] == 1  # the one-point line: the kind's own check
    assert got["sample"] == [[[4.0, 10.0], [20.0, 20.0]]]  # percent -> pixels of 40 x 20
    assert got["shape"] == [1, 1, 2, 2] and got["label"] == ["edge"]
    assert set(got["keys"]) == {"image", "sizes", "index", "task_id", "original_size",
                                "caption", "lines.valid", "lines.points", "lines.label", "lines.control",
                                "lines.annotation", "lines.source", "lines.rid"}
    assert got["crop"] == [[[[2.0, 5.0], [10.0, 10.0]]]]
    assert got["wds"]["keys"] and got["wds"]["points"]  # streamed sample == ds[0]
    assert got["wds"]["table"] == [[[10.0, 50.0], [50.0, 100.0]]]  # imported back in percent
    assert got["drawn"] > 0  # the preview draws the line
