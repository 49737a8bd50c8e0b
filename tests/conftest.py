"""Shared pytest settings: quiet progress bars, one torch thread per test process; the moto S3
server every folder's remote tests share, and the ``slow`` mark on each test that uses it."""

from __future__ import annotations

import os
from collections import Counter
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


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the S3 server is ``slow`` (the server starts on first use, and each such
    test uploads or reads through it): ``-m "not slow"`` never starts it. Files with slow
    tests run first."""
    for item in items:
        if "s3" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    # the files with the most slow tests first, each file's tests in their order:
    # pytest-xdist hands out whole files in this order, so the long ones start early instead
    # of ending the run with one worker busy and the others idle
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])
