"""The bench dataset: generated JPEGs + export, imported to raw and encoded shards, reused."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

STAMP = "bench-dataset.json"


@dataclass(frozen=True)
class BenchData:
    """Where the bench inputs live."""

    root: Path
    export: Path
    files: list[Path]
    raw: Path | None
    encoded: Path | None
    import_error: str | None = None


def ensure(root: str | Path, n: int, width: int, height: int, seed: int = 0) -> BenchData:
    """Make (or reuse, when the stamp matches) ``n`` images and their raw/encoded shards."""
    from npu_data.sample_data import make_bench_images

    base = Path(root) / f"bench_{n}_{width}x{height}_s{seed}"
    want = {"n": n, "width": width, "height": height, "seed": seed, "version": 1}
    stamp = base / STAMP
    ok = stamp.is_file() and json.loads(stamp.read_text()) == want
    if not ok:
        make_bench_images(base / "jpeg", n=n, width=width, height=height, seed=seed)
        stamp.write_text(json.dumps(want))
    export = base / "jpeg" / "export.json"
    files = sorted((base / "jpeg" / "images").glob("*.jpg"))
    try:
        from npu_data.shards.source import image_options
        from npu_data.shards.writer import WriteOptions, write_dataset
    except ImportError as exc:  # the shard writer is not installed in this checkout
        return BenchData(base, export, files, None, None, f"shard writer unavailable ({exc})")
    out: dict[str, Path] = {}
    for store in ("raw", "encoded"):
        path = base / f"shards_{store}"
        if not ok or not (path / "manifest.json").is_file():
            shutil.rmtree(path, ignore_errors=True)
            write_dataset(export, path, WriteOptions(store=store, workers=1,
                                                     images=image_options(export)))
        out[store] = path
    return BenchData(base, export, files, out["raw"], out["encoded"])
