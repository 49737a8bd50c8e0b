"""Label Studio exports: parsing, labeling configs, image references."""

from __future__ import annotations

from npu_data.annotations.brush_rle import decode_rle, rle_to_mask
from npu_data.annotations.config import label_map_from_config
from npu_data.annotations.images import (
    ImageError,
    ImageOptions,
    decode_image,
    load_image,
    read_image_bytes,
    resolve_image,
)
from npu_data.annotations.parse import (
    ParseResult,
    ParseStats,
    Rejection,
    load_export_meta,
    parse_export,
)
from npu_data.annotations.table import AnnotationTable

__all__ = [
    "AnnotationTable", "ImageError", "ImageOptions", "ParseResult", "ParseStats", "Rejection",
    "decode_image", "decode_rle", "label_map_from_config", "load_export_meta", "load_image",
    "parse_export", "read_image_bytes", "resolve_image", "rle_to_mask",
]
