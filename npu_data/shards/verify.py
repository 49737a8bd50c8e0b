"""Check a shard folder against its manifest: file sizes, sha256 and every sample's crc32."""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from npu_data.common.hashing import file_sha256
from npu_data.progress import progress
from npu_data.shards.format import DATA, INDEX, read_manifest


@dataclass
class Problem:
    """One thing wrong: where (shard, sample inside it, task id) and what."""

    shard: str
    message: str
    sample: int | None = None
    task_id: int | None = None
    index: int | None = None  # dataset index of the sample

    def __str__(self) -> str:
        where = self.shard
        if self.sample is not None:
            where += f" sample {self.sample} (dataset index {self.index}, task {self.task_id})"
        return f"{where}: {self.message}"


def verify_dataset(path: str | os.PathLike[str]) -> list[Problem]:
    """Every problem found in dataset ``path`` (empty list: all files and samples intact)."""
    root = Path(path)
    manifest = read_manifest(root)
    problems: list[Problem] = []
    start = 0
    for sh in progress(manifest["shards"], total=len(manifest["shards"]), desc="verify",
                       unit="shard"):
        name = sh["name"]
        bad_files = set()
        for fname, meta in sh["files"].items():
            f = root / name / fname
            if not f.is_file():
                problems.append(Problem(name, f"{fname} missing"))
                bad_files.add(fname)
            elif f.stat().st_size != meta["size"]:
                problems.append(Problem(name, f"{fname} has {f.stat().st_size} bytes, "
                                              f"manifest says {meta['size']}"))
                bad_files.add(fname)
            elif file_sha256(f) != meta["sha256"]:
                problems.append(Problem(name, f"{fname} sha256 differs from the manifest"))
                if fname == INDEX:
                    bad_files.add(fname)
        if not bad_files & {DATA, INDEX}:  # a changed data.bin: find the samples
            problems.extend(_check_samples(root / name, name, start))
        start += int(sh["samples"])
    return problems


def _check_samples(folder: Path, name: str, start: int) -> list[Problem]:
    index = np.load(folder / INDEX, mmap_mode="r", allow_pickle=False)
    size = (folder / DATA).stat().st_size
    data = np.memmap(folder / DATA, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    out: list[Problem] = []
    for j, rec in enumerate(index):
        off, length = int(rec["offset"]), int(rec["length"])
        where = {"sample": j, "task_id": int(rec["task_id"]), "index": start + j}
        if off + length > size:
            out.append(Problem(name, "payload runs past the end of data.bin", **where))
        elif zlib.crc32(cast(Any, data[off:off + length])) != int(rec["crc32"]):
            out.append(Problem(name, "payload crc32 mismatch (corrupt bytes)", **where))
    return out
