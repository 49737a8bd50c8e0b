"""Shared pytest settings: quiet progress bars, one torch thread per test process."""

from __future__ import annotations

import os

os.environ.setdefault("NPU_DATA_QUIET", "1")
