"""WebDataset tars as a format: ``<key>.<jpg|png>`` + ``<key>.json`` per sample (pixel
coordinates, docs/format.md), read and written like MosaicML streaming's formats and streamed
through small stages like webdataset's.

- ``mapping``: a sample's annotation columns <-> its JSON (versions 1 and 2),
- ``writer``: ``export_wds`` (tars written atomically, then their manifest),
- ``reader``: tar stream -> samples (``TarAccess``: which URLs may be read) -> import table,
- ``stages``: decode, annotations, crop at read, split, shuffle,
- ``stream``: ``WebDatasetStream``, the iterable dataset chaining them.
"""

from __future__ import annotations

from typing import Any

from npu_data.formats.webdataset.reader import (
    TarAccess,
    WdsSample,
    iter_tar_samples,
    read_wds_samples,
    wds_to_table,
)
from npu_data.formats.webdataset.writer import export_wds

__all__ = ["TarAccess", "WdsSample", "WebDatasetStream", "export_wds", "iter_tar_samples",
           "read_wds_samples", "wds_to_table"]


def __getattr__(name: str) -> Any:
    if name == "WebDatasetStream":  # torch and the loaders only when streaming
        from npu_data.formats.webdataset.stream import WebDatasetStream

        return WebDatasetStream
    raise AttributeError(f"module 'npu_data.formats.webdataset' has no attribute {name!r}")
