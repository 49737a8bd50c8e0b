"""Sample stores made as a user makes them (``npu-data import`` of a generated project)."""

from __future__ import annotations

from pathlib import Path

from npu_data.cli import main
from npu_data.tools.sample_data import make_sample_project


def import_sample(tmp: Path, store: str, n: int = 9) -> Path:
    """``npu-data import`` of an ``n``-image sample project (96x72, every annotation and
    prediction) into ``tmp/ds-<store>``, shards of 4; the store's path."""
    proj = make_sample_project(tmp / f"proj-{store}", n_images=n, width=96, height=72)
    out = tmp / f"ds-{store}"
    rc = main(["import", str(proj.export_path), "--out", str(out), "--store", store,
               "--images-root", str(proj.root), "--annotations", "all", "--with-predictions",
               "--shard-size", "4"])
    assert rc == 0
    return out
