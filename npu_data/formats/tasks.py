"""What every source reader writes: Label Studio tasks in one JSON export, so a folder, a
parquet file, a tar or a COCO file goes through the one import path (``annotations.parse``
-> ``shards.writer``) and lands in the same kinds as a Label Studio project.

A reader builds tasks with :func:`image_task` and the ``*_result`` helpers (percent
coordinates, as Label Studio writes them) and streams them into a :class:`TaskFile`. The file
is written atomically and is the same bytes for the same source, so ``--resume`` knows it.
Images held as bytes (parquet, tars) are written under the staging folder's ``media/`` by
:func:`media_path`; image references are relative to the ``images_root`` the reader returns.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from npu_data.common.atomic import atomic_file
from npu_data.common.paths import inside

CAPTION = "caption"  # the TextArea control (and task data key) a caption goes under
LABEL = "label"  # the Choices control of a class label
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff",
                    ".ppm", ".pgm")


@dataclass
class Converted:
    """A source turned into a Label Studio export: where it is, where its relative image
    references point, the labeling config fixing label order (or None), and what to say."""

    fmt: str
    export: Path
    images_root: Path
    config: Path | None = None
    notes: list[str] = field(default_factory=list)


def image_task(task_id: int, ref: str, results: Sequence[dict[str, Any]] = (),
               data: dict[str, Any] | None = None) -> dict[str, Any]:
    """One task: ``data.image`` = ``ref`` (plus ``data``), one annotation holding ``results``."""
    return {"id": task_id, "data": {"image": ref, **(data or {})},
            "annotations": [{"id": task_id, "result": list(results)}] if results else []}


def caption_results(captions: Sequence[str]) -> list[dict[str, Any]]:
    """A TextArea result holding ``captions`` (the first is the sample's caption)."""
    if not captions:
        return []
    return [{"id": "caption", "from_name": CAPTION, "to_name": "image", "type": "textarea",
             "value": {"text": list(captions)}}]


def choice_result(label: str, control: str = LABEL) -> dict[str, Any]:
    """A Choices result: the sample's class ``label`` under ``control``."""
    return {"id": control, "from_name": control, "to_name": "image", "type": "choices",
            "value": {"choices": [label]}}


def sized(result: dict[str, Any], width: int, height: int) -> dict[str, Any]:
    """``result`` with the image size Label Studio writes beside region results."""
    result["original_width"], result["original_height"] = int(width), int(height)
    result["image_rotation"] = 0
    return result


def label_config(controls: dict[str, tuple[str, Sequence[str]]]) -> str:
    """A labeling config fixing each control's labels and their order: ``{name: (tag,
    labels)}`` with tag ``Choices``, ``RectangleLabels``, ``PolygonLabels``, ``BrushLabels``
    or ``KeyPointLabels``."""
    from xml.sax.saxutils import quoteattr

    lines = ['<View>', '  <Image name="image" value="$image"/>']
    for name, (tag, labels) in controls.items():
        lines.append(f'  <{tag} name={quoteattr(name)} toName="image">')
        lines.extend(f'    <{"Choice" if tag == "Choices" else "Label"} '
                     f'value={quoteattr(lab)}/>' for lab in labels)
        lines.append(f'  </{tag}>')
    lines.append('</View>')
    return "\n".join(lines) + "\n"


class TaskFile:
    """A Label Studio JSON export written one task at a time, atomically (``with``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._ctx = atomic_file(path)
        self._f: BinaryIO | None = None

    def __enter__(self) -> TaskFile:
        self._f = self._ctx.__enter__()
        self._f.write(b"[")
        return self

    def add(self, task: dict[str, Any]) -> None:
        assert self._f is not None
        self._f.write(b"\n" if not self.count else b",\n")
        self._f.write(orjson.dumps(task))
        self.count += 1

    def extend(self, tasks: Iterable[dict[str, Any]]) -> None:
        for t in tasks:
            self.add(t)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> Any:
        if kind is None and self._f is not None:
            self._f.write(b"\n]\n")
        return self._ctx.__exit__(kind, exc, tb)


def write_config(stage: Path, text: str) -> Path:
    """The labeling config ``text`` written as ``stage/label_config.xml``."""
    from npu_data.common.atomic import atomic_write_bytes

    path = stage / "label_config.xml"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def media_path(stage: Path, n: int, name: str, ext: str, where: str) -> Path:
    """Where image bytes of sample ``n`` (named ``name`` in its source) are written: one safe
    file name under ``stage/media`` (``where`` names the source in a refusal)."""
    media = stage / "media"
    media.mkdir(parents=True, exist_ok=True)
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80].strip(".")
    return inside(media, f"{n:09d}-{base or 'image'}.{ext.lstrip('.').lower()}", where=where)


def write_media(path: Path, data: bytes) -> None:
    """``data`` at ``path`` unless the same bytes are there already (a resumed import).

    Written beside it and renamed, but not fsynced: the file is a staging copy whose bytes
    are compared in full before it is reused, so one cut short by a crash is written again,
    and the shards made from it are synced themselves (two fsyncs per image were 85% of a
    reader's time for small images)."""
    try:
        if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    part = path.with_name(f".{path.name}.part")
    try:
        with open(part, "wb") as f:
            f.write(data)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def relative(path: Path, root: Path) -> str:
    """``path`` as a reference relative to ``root`` (``/`` separators)."""
    return Path(os.path.relpath(path, root)).as_posix()
