"""Fixtures shared by the annotation tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.labelstudio_fake import Fake
from tests.support.local_http import serving


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fake Label Studio server's URL (tests/support/labelstudio_fake.py), its state reset."""
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "secret-token-1")
    Fake.cut, Fake.hits = False, []
    with serving(Fake) as port:
        yield f"http://127.0.0.1:{port}"
