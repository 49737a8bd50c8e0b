"""npu-data: Label Studio annotations to memory-mapped shards and on-device augmentation."""

from __future__ import annotations

__version__ = "0.1.0"
