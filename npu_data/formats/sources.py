"""What ``npu-data import SRC`` reads: the source's format, detected from what ``SRC`` is (a
folder's layout, a file's extension and first bytes) or forced with ``--format NAME``, and the
reader that turns it into a Label Studio export (``formats.tasks``).

Formats (aliases in brackets): ``labelstudio`` [ls, json] — Label Studio JSON / JSON_MIN /
pre-1.0; ``imagefolder`` [torchvision]; ``kohya`` [sd-scripts]; ``hf-imagefolder``
[metadata]; ``hf-parquet`` [parquet]; ``hf-disk`` [arrow, save-to-disk]; ``webdataset``
[wds, tar] — npu-data's own tars and foreign ones (img2dataset), told apart by content;
``coco``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_data.errors import UserError, UserValueError

FORMATS = ("labelstudio", "imagefolder", "kohya", "hf-imagefolder", "hf-parquet", "hf-disk",
           "webdataset", "coco")
ALIASES = {"ls": "labelstudio", "json": "labelstudio", "json-min": "labelstudio",
           "label-studio": "labelstudio", "torchvision": "imagefolder",
           "image-folder": "imagefolder", "sd-scripts": "kohya", "metadata": "hf-imagefolder",
           "hf": "hf-imagefolder", "parquet": "hf-parquet", "arrow": "hf-disk",
           "save-to-disk": "hf-disk", "wds": "webdataset", "tar": "webdataset",
           "img2dataset": "webdataset"}
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")


@dataclass(frozen=True)
class SourceOptions:
    """What a reader may need besides its paths: kohya's ``caption_extension``; the tar
    access rules (``formats.webdataset.reader.TarAccess``) for tars."""

    caption_extension: str | None = None
    tar_access: Any = None


def format_name(name: str) -> str:
    """The canonical name of ``--format NAME`` (an alias allowed)."""
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise UserValueError(f"{{format={name}}}: unknown — use one of {', '.join(FORMATS)}",
                             option="format")
    return key


def is_tar(source: str) -> bool:
    """Whether ``source`` (a path or URL, its query ignored) names a tar."""
    return source.split("?", 1)[0].lower().endswith(TAR_SUFFIXES)


def _json_kind(path: Path) -> str:
    """``coco`` for a JSON object with ``images`` and ``annotations``; else ``labelstudio``."""
    with open(path, "rb") as f:
        head = f.read(1 << 16).lstrip()
    if head.startswith(b"{"):
        if b'"images"' in head or b'"categories"' in head:
            return "coco"
        import orjson

        if path.stat().st_size <= 64 << 20:  # a small object: read it to be sure
            try:
                doc = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                return "labelstudio"  # the parser names the byte at fault
            if isinstance(doc, dict) and "images" in doc:
                return "coco"
    return "labelstudio"


def _folder_kind(root: Path) -> str:
    """The layout of a folder (the first rule that matches)."""
    from npu_data.formats.hf import imagefolder as hf_folder
    from npu_data.formats.kohya import reader as kohya

    if (root / "dataset_info.json").is_file() or (root / "state.json").is_file() or (
            (root / "dataset_dict.json").is_file()):
        return "hf-disk"
    if any((root / m).is_file() for m in hf_folder.METADATA) or hf_folder.metadata_files(root):
        return "hf-imagefolder"
    if any(root.glob("*.parquet")) or any(root.glob("data/*.parquet")):
        return "hf-parquet"
    if any(p.is_file() and is_tar(p.name) for p in root.iterdir()):
        return "webdataset"
    if kohya.looks_like(root):
        return "kohya"
    if kohya.images_in(root) and any(p.suffix in kohya.CAPTION_EXTENSIONS
                                     for p in root.iterdir()):
        return "kohya"
    if any(p.is_dir() for p in root.iterdir()):
        return "imagefolder"
    if kohya.images_in(root):
        return "kohya"
    raise UserError(f"{root}: a folder with no images, class folders, caption files, metadata, "
                    "parquet or tar files — pass the export file or the folder that holds the "
                    f"data, or --format ({', '.join(FORMATS)})")


def detect(sources: Sequence[str]) -> str:
    """The format of ``sources`` (one folder or file, or several tars / parquet files)."""
    if all(is_tar(s) for s in sources):
        return "webdataset"
    if all(s.lower().endswith(".parquet") for s in sources):
        return "hf-parquet"
    if len(sources) != 1:
        raise UserError(f"import takes one source, got {len(sources)} — several are allowed "
                        "only as WebDataset .tar shards or parquet files (all of one kind)")
    src = sources[0]
    if "://" in src:
        return "labelstudio"
    path = Path(src)
    if path.is_dir():
        return _folder_kind(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder — pass a Label Studio export (JSON), a "
                        "dataset folder (ImageFolder, kohya, Hugging Face), parquet, .tar or "
                        "COCO JSON, or run `npu-data pull`")
    if path.suffix.lower() == ".arrow":
        return "hf-disk"
    if path.suffix.lower() == ".json":
        return _json_kind(path)
    return "labelstudio"


def convert(fmt: str, sources: Sequence[str], stage: Path, options: SourceOptions) -> Any:
    """Read ``sources`` of format ``fmt`` (not ``labelstudio``) into a Label Studio export in
    ``stage``: a ``formats.tasks.Converted``."""
    if fmt in ("imagefolder", "kohya", "hf-imagefolder") and len(sources) != 1:
        raise UserError(f"--format {fmt} takes one folder, got {len(sources)}")
    if fmt in ("imagefolder", "kohya", "hf-imagefolder"):
        root = Path(sources[0])
        if not root.is_dir():
            raise UserError(f"{root}: not a folder — --format {fmt} reads a folder")
        root = root.resolve()
        if fmt == "imagefolder":
            from npu_data.formats.imagefolder.reader import read as read_folder
            return read_folder(root, stage)
        if fmt == "kohya":
            from npu_data.formats.kohya.reader import read as read_kohya
            return read_kohya(root, stage, options.caption_extension)
        from npu_data.formats.hf.imagefolder import read as read_meta
        return read_meta(root, stage)
    module, function = READERS[fmt]
    return getattr(importlib.import_module(module), function)(list(sources), stage, options)


# the readers that take (sources, stage, options) -> Converted
READERS = {"hf-parquet": ("npu_data.formats.hf.parquet", "read_parquet"),
           "hf-disk": ("npu_data.formats.hf.parquet", "read_disk"),
           "webdataset": ("npu_data.formats.webdataset.foreign", "read"),
           "coco": ("npu_data.formats.coco.reader", "read")}
