"""A kohya sd-scripts DreamBooth-style folder -> Label Studio tasks.

As ``library/train_util.py`` reads it: every sub-folder named ``<repeats>_<class tokens>``
is a subset whose images (``.png .jpg .jpeg .webp .bmp``, any case, not recursive) are seen
``repeats`` times an epoch; a folder without the number prefix is ignored (kohya warns and
skips it; so do we, and say so). An image's caption is the first line, stripped, of the
same-stem caption file (``--caption-extension``; by default ``.txt``, then ``.caption``),
else the folder's class tokens. A root that holds images itself is one subset seen once.
Each task keeps ``data.repeats`` and ``data.class_tokens``; every non-empty line of the
caption file is a text of the caption TextArea (the first is the caption).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from npu_data.errors import UserError
from npu_data.formats.tasks import (
    CAPTION,
    Converted,
    TaskFile,
    caption_results,
    image_task,
    relative,
)
from npu_data.shards.repeats import MAX_REPEATS

EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")  # train_util.IMAGE_EXTENSIONS
CAPTION_EXTENSIONS = (".txt", ".caption")
SUBSET = re.compile(r"^(\d+)_(.*)$")


@dataclass
class Subset:
    """One image folder: its path, repeat count and class tokens."""

    folder: Path
    repeats: int
    tokens: str


def subsets(root: Path) -> tuple[list[Subset], list[str]]:
    """(the subsets of ``root``, the sub-folders kohya ignores)."""
    found, ignored = [], []
    if images_in(root):
        found.append(Subset(root, 1, ""))
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        m = SUBSET.match(d.name)
        if m is None:
            if images_in(d):
                ignored.append(d.name)
        else:  # int("0001") = 1, as kohya's int(tokens[0])
            found.append(Subset(d, int(m.group(1)), m.group(2)))
    return found, ignored


def looks_like(root: Path) -> bool:
    """Whether ``root`` has a ``<repeats>_<tokens>`` folder of images."""
    return any(SUBSET.match(d.name) and images_in(d) for d in root.iterdir() if d.is_dir())


def images_in(folder: Path) -> list[Path]:
    """The images directly in ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir()
                  if p.suffix.lower() in EXTENSIONS and p.is_file())


def captions(image: Path, extensions: tuple[str, ...]) -> list[str] | None:
    """The non-empty stripped lines of the image's caption file (None: no such file)."""
    for ext in extensions:
        path = image.with_suffix(ext)
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{path}: not UTF-8 text — save the caption file as UTF-8 "
                                "(kohya reads it so too)") from None
            lines = text.splitlines()
            if not lines:  # kohya: "caption file is empty"
                raise UserError(f"{path}: the caption file is empty — write the caption or "
                                "delete the file (the folder's class tokens are used then)")
            first = lines[0].strip()
            return [first] + [ln.strip() for ln in lines[1:] if ln.strip()]
    return None


def read(root: Path, stage: Path, caption_extension: str | None = None) -> Converted:
    """Write ``root``'s tasks to ``stage/export.json``."""
    exts = CAPTION_EXTENSIONS if caption_extension is None else (
        caption_extension if caption_extension.startswith(".") else f".{caption_extension}",)
    found, ignored = subsets(root)
    never = [s.folder.name for s in found if s.repeats < 1]  # kohya skips them (a warning)
    found = [s for s in found if s.repeats >= 1]
    for s in found:
        if s.repeats > MAX_REPEATS:
            raise UserError(f"{s.folder}: {s.repeats} repeats an epoch, npu-data serves at most "
                            f"{MAX_REPEATS} — rename the folder with a smaller count")
    plan = [(s, images_in(s.folder)) for s in found]
    if not any(files for _, files in plan):
        raise UserError(f"{root}: no images in <repeats>_<name> folders (e.g. 10_mychar/) or "
                        f"in the folder itself ({', '.join(EXTENSIONS)})"
                        + (f"; folders of 0 repeats are skipped, as kohya does ({never[0]}: "
                           "rename it 1_<name>)" if never else "")
                        + " — is this a kohya training folder? pass --format to read it as "
                        "another layout")
    rows = []
    for s, files in plan:
        for path in files:
            texts = captions(path, exts)
            if texts is None:
                texts = [s.tokens] if s.tokens else []
            rows.append((s, path, texts))
    uncaptioned = 0
    with TaskFile(stage / "export.json") as out:
        for s, path, texts in rows:
            uncaptioned += not texts or not texts[0]
            data = {"repeats": s.repeats, "class_tokens": s.tokens}
            if texts:
                data[CAPTION] = texts[0]
            out.add(image_task(out.count, relative(path, root), caption_results(texts), data))
        count = out.count
    notes = [f"kohya: {count} images in {len(plan)} folder(s) (repeats "
             + ", ".join(f"{s.folder.name}={s.repeats}" for s, _ in plan[:6])
             + (", ..." if len(plan) > 6 else "") + "), captions from "
             + "/".join(exts) + " files, else the folder's class tokens"]
    if ignored:
        notes.append(f"kohya: ignored {len(ignored)} folder(s) without a '<repeats>_' prefix "
                     f"({', '.join(ignored[:5])}), as kohya does — rename them 1_<name> to "
                     "import them")
    if never:
        notes.append(f"kohya: ignored {len(never)} folder(s) of 0 repeats "
                     f"({', '.join(never[:5])}), as kohya does — rename them 1_<name> to "
                     "import them")
    if uncaptioned:
        notes.append(f"kohya: {uncaptioned} image(s) have no caption (no caption file, no "
                     "class tokens)")
    return Converted("kohya", stage / "export.json", root, None, notes)
