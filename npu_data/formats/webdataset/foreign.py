"""WebDataset tars npu-data did not write (img2dataset's, webdataset.TarWriter's) -> Label
Studio tasks.

Members are grouped into samples as ``webdataset`` groups them (``reader.iter_tar_groups``: the
key is the path up to the first dot of the file name, the extension the rest, lower-cased).
Per sample: the image is the first of ``IMAGE_ORDER`` it holds (written under the staging
folder's ``media/``); ``txt`` is the caption (UTF-8, as webdataset decodes it: ``data.caption``
and a TextArea); the keys of ``json`` (an object) are task data, with ``data.key`` the sample's
key unless the JSON has one (img2dataset's ``url``, ``key``, ``width``, ``status``, ... kept
as they are; a key ``image`` gives way to the image reference); ``cls`` (an integer, as
webdataset reads it) is a class label — a Choices control ``label`` whose labels are
``0 .. max``, so a label's index is the tar's integer. Other members are left out and
counted in a note.

npu-data's own tars (``export-wds``: each ``KEY.json`` has ``task_id``, ``controls``,
``labels``, ...) hold annotations this reader would drop: :func:`is_own_tar` tells them apart
by content, and this reader refuses them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from npu_data.errors import UserError
from npu_data.formats.tasks import (
    CAPTION,
    LABEL,
    Converted,
    TaskFile,
    caption_results,
    choice_result,
    image_task,
    label_config,
    media_path,
    relative,
    write_config,
    write_media,
)
from npu_data.formats.webdataset.reader import TarAccess, TarGroup, iter_tar_groups, shown

IMAGE_ORDER = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm")
OWN_KEYS = frozenset({"task_id", "width", "height", "controls", "labels"})  # mapping.py's
FIX = "write the tar again"
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def looks_own(ann: Any) -> bool:
    """Whether a sample's parsed ``json`` is npu-data's (version 1 or 2, ``mapping``)."""
    return isinstance(ann, dict) and OWN_KEYS <= ann.keys()


def is_own_tar(url: str, access: TarAccess | None = None) -> bool:
    """Whether the tar ``url`` was written by npu-data: its first sample's ``json`` is
    npu-data's. Reads only the first sample (a remote tar's first bytes)."""
    groups = iter_tar_groups(url, access, FIX)
    try:
        first = next(groups, None)
    finally:
        groups.close()
    if first is None or "json" not in first.parts:
        return False
    try:
        return looks_own(orjson.loads(first.parts["json"]))
    except orjson.JSONDecodeError:
        return False


def tars_of(sources: Sequence[str]) -> list[str]:
    """The tars of ``sources``: the paths and URLs as given, a local folder's tars sorted."""
    if len(sources) == 1 and Path(sources[0]).is_dir():
        root = Path(sources[0])
        tars = sorted(str(p) for p in root.iterdir()
                      if p.is_file() and p.name.lower().endswith(TAR_SUFFIXES))
        if not tars:
            raise UserError(f"{root}: no .tar files in the folder — pass the tars")
        return tars
    return list(sources)


class _Tasks:
    """The tasks of the samples read so far, and what the notes say about them."""

    def __init__(self, stage: Path, out: TaskFile) -> None:
        self.stage, self.out = stage, out
        self.classes: set[int] = set()
        self.left_out: Counter[str] = Counter()
        self.more_images = 0

    def add(self, g: TarGroup) -> None:
        where = f"{shown(g.url)}: sample {g.key}"
        ann = _json(g, where) if "json" in g.parts else None
        if looks_own(ann):
            raise UserError(f"{shown(g.url)}: written by npu-data (sample {g.key}'s json has "
                            "task_id, controls and labels) — import it as npu-data's own "
                            "WebDataset, on its own, not mixed with other tars")
        images = [e for e in IMAGE_ORDER if e in g.parts]
        if not images:
            raise UserError(f"{where}: no image member ({', '.join(IMAGE_ORDER)}; it has "
                            f"{', '.join(sorted(g.parts)) or 'none'}) — {FIX} with each "
                            "sample's image")
        self.more_images += len(images) > 1
        data: dict[str, Any] = {}
        if "json" in g.parts:
            if not isinstance(ann, dict):
                raise UserError(f"{where}: its json is not an object — {FIX} with a JSON "
                                "object per sample")
            data.update((k, v) for k, v in ann.items() if k != "image")
        data.setdefault("key", g.key)
        results: list[dict[str, Any]] = []
        if "txt" in g.parts:
            text = _text(g.parts["txt"], where)
            data[CAPTION] = text
            results += caption_results([text]) if text else []
        if "cls" in g.parts:
            label = _class(g.parts["cls"], where)
            self.classes.add(label)
            data[LABEL] = str(label)
            results.append(choice_result(str(label)))
        used = {images[0], "json", "txt", "cls"}
        self.left_out.update(e for e in g.parts if e not in used)
        file = media_path(self.stage, self.out.count, g.key.rpartition("/")[2], images[0], where)
        write_media(file, g.parts[images[0]])
        self.out.add(image_task(self.out.count, relative(file, self.stage), results, data))


def _json(g: TarGroup, where: str) -> Any:
    try:
        return orjson.loads(g.parts["json"])
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{where}: its json is not JSON ({exc}) — {FIX}") from None


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: its txt is not UTF-8 (webdataset decodes it as UTF-8) — "
                        f"{FIX} with the caption in UTF-8") from None


def _class(raw: bytes, where: str) -> int:
    try:
        label = int(raw)  # webdataset: int(data)
    except ValueError:
        raise UserError(f"{where}: its cls {raw[:40]!r} is not an integer (webdataset reads "
                        f"it with int()) — {FIX} with the class index") from None
    if label < 0:
        raise UserError(f"{where}: its cls is {label} — a class index is 0 or more")
    return label


def read(sources: list[str], stage: Path, options: Any) -> Converted:
    """Write the tasks of the tars ``sources`` (or a folder of them) to
    ``stage/export.json`` (module doc)."""
    access = getattr(options, "tar_access", None) or TarAccess()
    tars = tars_of(sources)
    with TaskFile(stage / "export.json") as out:
        tasks = _Tasks(stage, out)
        for url in tars:
            for group in iter_tar_groups(url, access, FIX):
                tasks.add(group)
        count = out.count
    if not count:
        raise UserError(f"no samples in {', '.join(shown(t) for t in tars[:3])} — "
                        "a WebDataset tar holds KEY.jpg (or png, webp, ...) members")
    config = None
    notes = [f"webdataset: {count} samples from {len(tars)} tar(s)"]
    if tasks.classes:
        names = [str(i) for i in range(max(tasks.classes) + 1)]
        config = write_config(stage, label_config({LABEL: ("Choices", names)}))
        notes[0] += f"; class labels 0..{len(names) - 1} from cls"
    if tasks.more_images:
        notes.append(f"webdataset: {tasks.more_images} sample(s) hold several images; the "
                     f"first of {', '.join(IMAGE_ORDER)} was imported")
    if tasks.left_out:
        notes.append("webdataset: members left out: " + ", ".join(
            f"{n} .{e}" for e, n in tasks.left_out.most_common(8)))
    return Converted("webdataset", stage / "export.json", stage, config, notes)
