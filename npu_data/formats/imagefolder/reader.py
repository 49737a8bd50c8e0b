"""A torchvision ``ImageFolder`` -> Label Studio tasks: one class per sub-folder, labels and
their order exactly ``torchvision.datasets.ImageFolder``'s ``class_to_idx`` (the sorted
folder names), its extensions, its walk (nested folders, sorted, symlinks followed)."""

from __future__ import annotations

import os
from pathlib import Path

from npu_data.errors import UserError
from npu_data.formats.tasks import (
    LABEL,
    Converted,
    TaskFile,
    choice_result,
    image_task,
    label_config,
    relative,
    write_config,
)

# torchvision.datasets.folder.IMG_EXTENSIONS
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def find_classes(root: Path) -> list[str]:
    """The class folders of ``root`` in ``class_to_idx`` order (sorted names)."""
    return sorted(e.name for e in os.scandir(root) if e.is_dir())


def class_files(root: Path, name: str) -> list[Path]:
    """The images of class ``name`` in ImageFolder's order (``make_dataset``)."""
    out: list[Path] = []
    for folder, _, files in sorted(os.walk(root / name, followlinks=True)):
        out.extend(Path(folder) / f for f in sorted(files) if f.lower().endswith(EXTENSIONS))
    return out


def read(root: Path, stage: Path) -> Converted:
    """Write ``root``'s tasks to ``stage/export.json``, its class order to the config."""
    classes = find_classes(root)
    if not classes:
        raise UserError(f"{root}: no class folders — an ImageFolder holds one folder per class "
                        "(root/cat/1.jpg, root/dog/2.jpg); pass --format to read it as "
                        "another layout")
    files = {name: class_files(root, name) for name in classes}
    empty = [name for name in classes if not files[name]]
    if empty:  # torchvision refuses these too (FileNotFoundError in make_dataset)
        raise UserError(f"{root}: class folder(s) {', '.join(empty[:5])} hold no image "
                        f"({', '.join(EXTENSIONS)}) — remove them or add images, as "
                        "torchvision's ImageFolder requires")
    with TaskFile(stage / "export.json") as out:
        for name in classes:
            for path in files[name]:
                out.add(image_task(out.count, relative(path, root), [choice_result(name)],
                                   {LABEL: name}))
        count = out.count
    config = write_config(stage, label_config({LABEL: ("Choices", classes)}))
    return Converted("imagefolder", stage / "export.json", root, config,
                     [f"imagefolder: {count} images in {len(classes)} classes "
                      f"({', '.join(classes[:8])}{', ...' if len(classes) > 8 else ''})"])
