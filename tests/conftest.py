"""Shared pytest settings: quiet progress bars, one torch thread per test process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("NPU_DATA_QUIET", "1")


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """moto's S3 server on 127.0.0.1 with a dataset at s3://BUCKET/ds (``tests/support/s3_server.py``):
    one per session, shared by every folder's remote tests."""
    from tests.support.s3_server import serve

    yield from serve(tmp_path_factory)
