"""What the writer imports from: an export file, a ParseResult or an AnnotationTable."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npu_data.annotations.table import AnnotationTable
from npu_data.common.hashing import file_sha256
from npu_data.errors import UserError


@dataclass
class Source:
    """A table to write plus what parsing already rejected."""

    table: AnnotationTable
    rejected: list[dict[str, Any]] = field(default_factory=list)
    task_index: np.ndarray | None = None  # table row -> task position in the export
    sha256: str | None = None
    tasks: int | None = None  # tasks in the export


def _rejections(items: Any) -> list[dict[str, Any]]:
    out = []
    for r in items or ():
        get = r.get if isinstance(r, dict) else (lambda k, r=r: getattr(r, k, None))
        index = get("index")
        if index is None:
            index = get("task_index")
        tid = get("task_id")
        out.append({"index": int(index) if index is not None else -1,
                    "task_id": None if tid is None else int(tid),
                    "reason": str(get("reason"))})
    return out


def _task_index(result: Any, table: AnnotationTable, rejected: list[dict[str, Any]],
                tasks: int | None) -> np.ndarray | None:
    """Export position of every table row: given by the parser, or the positions not rejected."""
    ti = getattr(result, "task_index", None)
    if ti is not None:
        return np.asarray(ti, dtype=np.int64)
    if tasks is not None:
        bad = {r["index"] for r in rejected}
        keep = np.array([i for i in range(tasks) if i not in bad], dtype=np.int64)
        if len(keep) == table.num_samples:
            return keep
    return None


def _stat(stats: Any, *names: str) -> int | None:
    for name in names:
        v = stats.get(name) if isinstance(stats, dict) else getattr(stats, name, None)
        if isinstance(v, int):
            return v
    return None


def from_result(result: Any, sha256: str | None = None) -> Source:
    """A Source from a ParseResult-like object (``.table``, ``.rejected``, ``.stats``)."""
    table: AnnotationTable = result.table
    rejected = _rejections(getattr(result, "rejected", ()))
    tasks = _stat(getattr(result, "stats", None), "tasks", "num_tasks", "total_tasks")
    return Source(table, rejected, _task_index(result, table, rejected, tasks), sha256,
                  tasks if tasks is not None else table.num_samples + len(rejected))


def load_source(source: Any, parse_options: dict[str, Any]) -> Source:
    """Parse ``source`` (a path) with ``parse_options``, or wrap a ParseResult / table."""
    if isinstance(source, AnnotationTable):
        return Source(source, tasks=source.num_samples)
    if not isinstance(source, (str, os.PathLike)):
        return from_result(source)
    path = Path(source)
    if path.is_dir():
        raise UserError(f"{path}: a folder, not an export file — import it with `npu-data "
                        f"import {path} --out DATASET` (ImageFolder, kohya, Hugging Face, "
                        "parquet, tars) and open DATASET with ShardDataset")
    if not path.is_file():
        raise UserError(f"{path}: no such export file — export the project from Label Studio "
                        "(JSON) or run `npu-data pull`")
    parse = importlib.import_module("npu_data.annotations.parse")
    kwargs: dict[str, Any] = {
        "annotations": parse_options.get("annotations", "default"),
        "with_predictions": bool(parse_options.get("with_predictions", False)),
        "out_of_range": "reject" if parse_options.get("reject_out_of_range") else "clip",
    }
    config = parse_options.get("config")
    if config:
        cfg = Path(config)
        if not cfg.is_file():
            raise UserError(f"{cfg}: no such labeling config — pass the project's "
                            "label_config.xml (Settings > Labeling Interface > Code)")
        conf = importlib.import_module("npu_data.annotations.config")
        kwargs["labels"] = conf.label_map_from_config(cfg.read_text(encoding="utf-8"))
    result = parse.parse_export(path, **kwargs)
    return from_result(result, file_sha256(path))


def image_options(export: str | os.PathLike[str] | None, **given: Any) -> Any:
    """``annotations.images.ImageOptions`` from CLI-style keywords (paths made absolute).

    Relative image paths default to the export's folder.
    """
    images = importlib.import_module("npu_data.annotations.images")
    kw = {k: v for k, v in given.items() if v is not None}
    for key in ("images_root", "ls_data_dir", "local_files_root"):
        if key in kw:
            kw[key] = Path(kw[key]).resolve()
    if "images_root" not in kw and export is not None:
        kw["images_root"] = Path(export).resolve().parent
    return images.ImageOptions(**kw)
