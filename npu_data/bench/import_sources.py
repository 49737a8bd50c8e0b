"""Import time per source: the same ``--n`` small JPEGs laid out as each source
``npu-data import`` reads (Label Studio JSON, ImageFolder, kohya, Hugging Face imagefolder,
COCO, an img2dataset tar, Hugging Face parquet when pyarrow is installed), each imported
through the command line (a process each, its start included) ``--repeat`` times, the sources interleaved; min / median / max
seconds and images/s per source.

Run: ``npu-data bench sources [--n 1000] [--repeat 3] [--size 64x48]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image


def _jpegs(n: int, size: tuple[int, int], seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    base = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    for i in range(n):
        buf = io.BytesIO()
        Image.fromarray(np.roll(base, i, axis=1)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)


def make_sources(root: Path, n: int, size: tuple[int, int]) -> dict[str, list[str]]:
    """Each source's folder or files under ``root``: ``{name: import arguments}``."""
    jpegs = _jpegs(n, size)
    w, h = size
    box = [w / 4, h / 4, w / 2, h / 2]
    made: dict[str, list[str]] = {}
    ls = root / "labelstudio"
    tasks = []
    for i, data in enumerate(jpegs):
        _write(ls / "images" / f"{i}.jpg", data)
        tasks.append({"id": i + 1, "data": {"image": f"images/{i}.jpg", "caption": f"photo {i}"},
                      "annotations": [{"id": i + 1, "result": [{
                          "id": "b", "from_name": "label", "to_name": "image",
                          "type": "rectanglelabels", "original_width": w, "original_height": h,
                          "value": {"x": 25.0, "y": 25.0, "width": 50.0, "height": 50.0,
                                    "rotation": 0, "rectanglelabels": ["thing"]}}]}]})
    _write(ls / "export.json", json.dumps(tasks))
    made["labelstudio"] = [str(ls / "export.json")]
    for i, data in enumerate(jpegs):
        _write(root / "imagefolder" / f"class{i % 10}" / f"{i}.jpg", data)
        _write(root / "kohya" / f"{1 + i % 3}_thing" / f"{i}.jpg", data)
        _write(root / "kohya" / f"{1 + i % 3}_thing" / f"{i}.txt", f"a photo of thing {i}\n")
        _write(root / "hf-imagefolder" / f"{i}.jpg", data)
    made["imagefolder"] = [str(root / "imagefolder")]
    made["kohya"] = [str(root / "kohya")]
    _write(root / "hf-imagefolder" / "metadata.jsonl", "".join(
        json.dumps({"file_name": f"{i}.jpg", "text": f"photo {i}"}) + "\n" for i in range(n)))
    made["hf-imagefolder"] = [str(root / "hf-imagefolder")]
    coco = {"images": [{"id": i + 1, "file_name": f"{i}.jpg", "width": w, "height": h}
                       for i in range(n)],
            "annotations": [{"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": box,
                             "area": box[2] * box[3], "iscrowd": 0,
                             "segmentation": [[box[0], box[1], box[0] + box[2], box[1],
                                               box[0] + box[2], box[1] + box[3]]]}
                            for i in range(n)],
            "categories": [{"id": 1, "name": "thing"}]}
    _write(root / "coco" / "instances.json", json.dumps(coco))
    made["coco"] = [str(root / "coco" / "instances.json"), "--images-root",
                    str(root / "hf-imagefolder")]
    tar_path = root / "wds" / "00000.tar"
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w") as tar:  # img2dataset's members: jpg, txt, json
        for i, data in enumerate(jpegs):
            for ext, blob in (("jpg", data), ("txt", f"photo {i}".encode()),
                              ("json", json.dumps({"key": f"{i:09d}", "caption": f"photo {i}",
                                                   "status": "success"}).encode())):
                info = tarfile.TarInfo(f"{i:09d}.{ext}")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    made["webdataset"] = [str(tar_path)]
    with contextlib.suppress(ImportError):
        made["hf-parquet"] = [_parquet(root / "parquet" / "train.parquet", jpegs)]
    return made


def _parquet(path: Path, jpegs: list[bytes]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {"image": {"_type": "Image"}, "text": {"dtype": "string", "_type": "Value"}}
    image = pa.array([{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(jpegs)],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.table({"image": image, "text": [f"photo {i}" for i in range(len(jpegs))]})
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(meta), path, row_group_size=256)
    return str(path)


def time_import(args: list[str], out: Path) -> tuple[float, int]:
    """(seconds, exit code) of ``npu-data import ARGS --out OUT``, a process as a user runs
    it (its start included)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.parent / f"{out.name}.source", ignore_errors=True)
    t = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "npu_data.cli", "import", *args, "--out",
                         str(out)], capture_output=True,
                        env={**os.environ, "NPU_DATA_QUIET": "1"}).returncode
    return time.perf_counter() - t, rc


def main(argv: list[str] | None = None,
         timer: Callable[[list[str], Path], tuple[float, int]] = time_import) -> int:
    """Print one row per source; ``argv`` as on the command line."""
    ap = argparse.ArgumentParser(prog="npu-data bench sources")
    ap.add_argument("--n", type=int, default=1000, help="images (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per source (default %(default)s)")
    ap.add_argument("--size", default="64x48", help="image size WxH (default %(default)s)")
    args = ap.parse_args(argv)
    try:
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error("--size: WxH, e.g. 64x48")
    if args.n < 1 or args.repeat < 1 or w < 1 or h < 1:
        ap.error("--n, --repeat and the size must be positive")
    os.environ["NPU_DATA_QUIET"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="npu-import-sources-"))
    try:
        sources = make_sources(tmp / "src", args.n, (w, h))
        times: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(args.repeat):  # interleaved: every source once per round
            for name, src in sources.items():
                took, rc = timer(src, tmp / "out" / name)
                if rc != 0:
                    print(f"{name}: import failed (exit {rc})")
                    return 1
                times[name].append(took)
        print(f"import of {args.n} JPEGs {w}x{h} per source, {args.repeat} runs each "
              "(min / median / max s; images/s at the median)")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:<15} {min(ts):6.2f} / {med:6.2f} / {max(ts):6.2f} s  "
                  f"{args.n / med:8.0f} img/s")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
