"""Code blocks of the repository's docs, for the tests that run what the docs show."""

from __future__ import annotations

import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worked_example_code() -> str:
    """The ``lines`` kind module of docs/architecture.md ("Adding a kind")."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Adding a kind"):]
    return textwrap.dedent(section.split("```python\n", 1)[1].split("```", 1)[0])
