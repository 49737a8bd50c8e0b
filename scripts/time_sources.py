"""Import time of 1,000 small images per source (hf-parquet, hf-disk, webdataset), each source
written by its own ecosystem's writer (``datasets``, ``webdataset.TarWriter``): the reader's
conversion to Label Studio tasks, then the import into shards (raw store, one worker).

    PYTHONPATH=$PWD python scripts/time_sources.py [N] [SIDE]
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("NPU_DATA_QUIET", "1")


def _jpegs(n: int, side: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (side, side, 3), np.uint8)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        Image.fromarray(np.roll(base, i, axis=1)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    side = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    run(16, side, show=False)  # warm: modules imported, kernels built, caches filled
    run(n, side, show=True)


def run(n: int, side: int, show: bool) -> None:
    """Write the three sources of ``n`` images and time their imports."""
    import datasets as hd
    import webdataset as wds

    from npu_data.formats.sources import SourceOptions, convert
    from npu_data.shards.importer import import_dataset

    images = _jpegs(n, side)
    captions = [f"caption {i}" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        feats = hd.Features({"image": hd.Image(), "text": hd.Value("string"),
                             "label": hd.ClassLabel(names=[f"c{k}" for k in range(10)])})
        ds = hd.Dataset.from_dict({"image": [{"bytes": b, "path": f"{i}.jpg"}
                                             for i, b in enumerate(images)],
                                   "text": captions, "label": [i % 10 for i in range(n)]},
                                  features=feats)
        ds.to_parquet(str(tmp / "train.parquet"))
        ds.save_to_disk(str(tmp / "saved"))
        with wds.TarWriter(str(tmp / "00000.tar")) as sink:
            for i, b in enumerate(images):
                sink.write({"__key__": f"{i:09d}", "jpg": b, "txt": captions[i],
                            "json": {"key": f"{i:09d}", "status": "success"}, "cls": i % 10})
        for fmt, src in (("hf-parquet", tmp / "train.parquet"), ("hf-disk", tmp / "saved"),
                         ("webdataset", tmp / "00000.tar")):
            stage = tmp / f"stage-{fmt}"
            stage.mkdir()
            t0 = time.perf_counter()
            conv = convert(fmt, [str(src)], stage, SourceOptions())
            t1 = time.perf_counter()
            s = import_dataset(conv.export, tmp / f"ds-{fmt}", images_root=conv.images_root,
                               config=str(conv.config) if conv.config else None)
            t2 = time.perf_counter()
            assert s.samples == n, s
            if show:
                    print(f"{fmt:11s} {n} images {side}x{side}: read {t1 - t0:5.2f} s, import "
                      f"{t2 - t1:5.2f} s, total {t2 - t0:5.2f} s")


if __name__ == "__main__":
    main()
