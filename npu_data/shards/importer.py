"""The one import path: a Label Studio export and its images -> verified shards, behind both
``npu-data import`` and ``LabelStudioDataset``.

``import_options`` checks every option once, before anything is read, with the same one-line
errors for both (``npu_data.errors``: the options they name are spelled as flags by the CLI,
as keywords for a Python caller); ``import_dataset`` checks them and writes
(``shards.writer.write_dataset``).
"""

from __future__ import annotations

import os
from typing import Any

from npu_data.errors import UserTypeError
from npu_data.shards.distributed_import import SINGLE, Group
from npu_data.shards.source import image_options
from npu_data.shards.writer import Summary, WriteOptions, check_options, write_dataset

# where relative image references point and what may be fetched (annotations.ImageOptions)
IMAGE_OPTIONS = ("images_root", "ls_data_dir", "local_files_root", "allow_download",
                 "storage_endpoint", "download_workers", "max_download_bytes", "timeout")
# how the shards are written (shards.writer.WriteOptions)
WRITE_OPTIONS = ("store", "max_side", "reencode", "restart_markers", "workers", "shard_size",
                 "resume", "strict", "annotations", "with_predictions", "config",
                 "reject_out_of_range", "alpha", "max_pixels")
OPTIONS = IMAGE_OPTIONS + WRITE_OPTIONS


def import_options(export: str | os.PathLike[str] | None, *,
                   allowed: tuple[str, ...] = OPTIONS, **options: Any) -> WriteOptions:
    """The checked options of an import.

    Args:
        export: the export's path (relative image paths and ``images_root`` default to its
            folder), or None.
        allowed: the options the caller takes (``OPTIONS``, or fewer).
        **options: any of ``allowed`` (``npu-data import --help`` says what each does;
            ``max_download_bytes`` is ``--max-download-mb`` in bytes, ``timeout``
            ``--download-timeout``, ``restart_markers=False`` ``--keep-jpeg-bytes``). None
            leaves an image option at its default.

    Returns:
        The write options, image options included.

    Raises:
        UserTypeError: an unknown option, or a value of the wrong type.
        UserValueError: a value the import cannot use (``UserError`` s: one line, the fix).
    """
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise UserTypeError(f"unknown option(s) {', '.join(unknown)} — use "
                            f"{', '.join(allowed)}")
    images = image_options(export, **{k: options[k] for k in IMAGE_OPTIONS if k in options})
    opts = WriteOptions(images=images, **{k: options[k] for k in WRITE_OPTIONS if k in options})
    check_options(opts)
    return opts


def import_dataset(export: Any, out: str | os.PathLike[str], *,
                   anchor: str | os.PathLike[str] | None = None, group: Group = SINGLE,
                   **options: Any) -> Summary:
    """Import ``export`` and its images into the dataset folder ``out``.

    Args:
        export: a Label Studio JSON / JSON_MIN export path, or an ``AnnotationTable`` (e.g.
            read from WebDataset tars).
        out: the dataset folder to write (``resume=True`` keeps its complete shards).
        anchor: the path relative image references resolve against (default: ``export``
            when it is a path).
        group: the ranks splitting the shards (``shards.distributed_import``).
        **options: as for ``import_options``.

    Returns:
        What was written: samples, tasks, shards, rejected tasks and where they are listed.

    Raises:
        UserError: a bad option (before anything is read), a bad export, a folder that
            cannot be written, or with ``strict=True`` the first bad task.
    """
    if anchor is None and isinstance(export, (str, os.PathLike)):
        anchor = export
    return write_dataset(export, out, import_options(anchor, **options), group)
