"""The bench dataset: generated JPEGs + export, imported to raw and encoded shards and written
as WebDataset tars (``npu-data export-wds`` of the encoded shards: the same JPEG bytes), reused.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAMP = "bench-dataset.json"
TAR_LIST = "tars.json"
TARS = 16  # tars per dataset: whole tars per worker up to 16 workers


@dataclass(frozen=True)
class BenchData:
    """Where the bench inputs live (``None``: that form could not be made, see the error)."""

    root: Path
    export: Path
    files: list[Path]
    raw: Path | None
    encoded: Path | None
    import_error: str | None = None
    tars: list[Path] = field(default_factory=list)
    wds_error: str | None = None


def _tars(encoded: Path, out: Path, n: int, fresh: bool) -> list[Path]:
    from npu_data.common.atomic import atomic_write_bytes
    from npu_data.formats.webdataset.writer import export_wds

    listing = out / TAR_LIST
    if not fresh and listing.is_file():
        names = json.loads(listing.read_text())
        if all((out / name).is_file() for name in names):
            return [out / name for name in names]
    shutil.rmtree(out, ignore_errors=True)
    paths = export_wds(encoded, str(out / "bench-%04d.tar"), maxcount=math.ceil(n / TARS))
    atomic_write_bytes(listing, json.dumps([p.name for p in paths]).encode())
    return paths


def _written_with(shards: Path, options: dict[str, Any]) -> bool:
    """Whether ``shards`` holds a finished import with these options (an older writer's
    shards, e.g. JPEGs stored without restart markers, are written again)."""
    manifest = shards / "manifest.json"
    if not manifest.is_file():
        return False
    return bool(json.loads(manifest.read_text()).get("options") == json.loads(
        json.dumps(options)))


def ensure(root: str | Path, n: int, width: int, height: int, seed: int = 0) -> BenchData:
    """Make (or reuse, when the stamp matches) ``n`` images, their raw/encoded shards and tars."""
    from npu_data.common.atomic import atomic_write_bytes
    from npu_data.tools.sample_data import make_bench_images

    base = Path(root) / f"bench_{n}_{width}x{height}_s{seed}"
    want = {"n": n, "width": width, "height": height, "seed": seed, "version": 1}
    stamp = base / STAMP
    ok = stamp.is_file() and json.loads(stamp.read_text()) == want
    if not ok:
        make_bench_images(base / "jpeg", n=n, width=width, height=height, seed=seed)
        atomic_write_bytes(stamp, json.dumps(want).encode())
    export = base / "jpeg" / "export.json"
    files = sorted((base / "jpeg" / "images").glob("*.jpg"))
    try:
        from npu_data.shards.source import image_options
        from npu_data.shards.writer import WriteOptions, write_dataset
    except ImportError as exc:  # the shard writer is not installed in this checkout
        return BenchData(base, export, files, None, None, f"shard writer unavailable ({exc})",
                         wds_error="needs the shard writer")
    out: dict[str, Path] = {}
    rewritten = False
    for store in ("raw", "encoded"):
        path = base / f"shards_{store}"
        opts = WriteOptions(store=store, workers=1, images=image_options(export))
        if not ok or not _written_with(path, opts.fingerprint()):
            shutil.rmtree(path, ignore_errors=True)
            write_dataset(export, path, opts)
            rewritten = True
        out[store] = path
    try:
        tars = _tars(out["encoded"], base / "wds", n, fresh=not ok or rewritten)
    except ImportError as exc:
        return BenchData(base, export, files, out["raw"], out["encoded"],
                         wds_error=f"WebDataset export unavailable ({exc})")
    return BenchData(base, export, files, out["raw"], out["encoded"], tars=tars)
