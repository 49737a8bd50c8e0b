"""A Hugging Face / diffusers imagefolder -> Label Studio tasks.

As ``datasets``' ``imagefolder`` builder reads it: each ``metadata.jsonl`` or
``metadata.csv`` describes the images in its folder and below; ``file_name`` is the image's
path relative to that folder and every other column is the sample's (``data.<column>``, as a
Label Studio task keeps its data). The caption is the column ``--caption-field`` names, else
``caption`` / ``text`` / ``prompt`` (the import's rule for task data); ``datasets`` reads the
same columns. Images that no metadata row names are not imported (named in a note).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from npu_data.errors import UserError
from npu_data.formats.tasks import IMAGE_EXTENSIONS, Converted, TaskFile, image_task, relative

METADATA = ("metadata.jsonl", "metadata.csv")


def metadata_files(root: Path) -> list[Path]:
    """Every metadata file under ``root`` (sorted; hidden folders skipped)."""
    found = [p for name in METADATA for p in root.rglob(name)
             if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(found)


def rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of one metadata file."""
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            for n, row in enumerate(csv.DictReader(f), 2):
                yield n, dict(row)
        return
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise UserError(f"{path}:{n}: not a JSON object ({exc}) — one JSON object per "
                                "line, with file_name") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{n}: not a JSON object — one object per line, with "
                                "file_name")
            yield n, row


def read(root: Path, stage: Path) -> Converted:
    """Write the tasks of ``root``'s metadata files to ``stage/export.json``."""
    files = metadata_files(root)
    if not files:
        raise UserError(f"{root}: no metadata.jsonl or metadata.csv — a Hugging Face "
                        "imagefolder names each image's file_name there")
    named: set[Path] = set()
    try:
        with TaskFile(stage / "export.json") as out:
            for meta in files:
                for n, row in rows(meta):
                    name = row.get("file_name")
                    if not isinstance(name, str) or not name:
                        raise UserError(f"{meta}:{n}: no file_name — each row names its image "
                                        "file, relative to the metadata file's folder")
                    path = meta.parent / name
                    named.add(path)
                    data = {k: v for k, v in row.items() if k != "file_name"}
                    data["file_name"] = name
                    out.add(image_task(out.count, relative(path, root), (), data))
            count = out.count
    except UnicodeDecodeError as exc:
        raise UserError(f"{root}: a metadata file is not UTF-8 ({exc.reason}) — save it as "
                        "UTF-8") from None
    unnamed = [p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS
               and p not in named and not any(s.startswith(".") for s in
                                               p.relative_to(root).parts)]
    notes = [f"hf-imagefolder: {count} rows from {len(files)} metadata file(s)"]
    if unnamed:
        notes.append(f"hf-imagefolder: {len(unnamed)} image(s) under {root} are in no "
                     f"metadata file and were not imported (e.g. {relative(unnamed[0], root)})")
    return Converted("hf-imagefolder", stage / "export.json", root, None, notes)
