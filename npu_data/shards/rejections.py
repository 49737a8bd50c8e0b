"""The commonest reasons an import rejected tasks (``rejected.jsonl``), each with its fix."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import orjson

_NUMBER = re.compile(r"\d+")
# (a phrase of the reason, the fix to print; {root} is the images root)
FIXES = (
    ("image file not found", "image references are resolved under --images-root {root}: is "
                             "it the folder that holds them (not one folder too deep or too "
                             "shallow)?"),
    ("outside the images root", "pass --images-root a folder that holds every image"),
    ("an absolute path", "pass --images-root a folder that holds the absolute paths"),
    ("no image reference", "put each task's image under data.image (a path or URL)"),
    ("an uploaded file", "pass --ls-data-dir, Label Studio's data folder (media/upload)"),
    ("a local file", "pass --local-files-root, Label Studio's LOCAL_FILES_DOCUMENT_ROOT"),
    ("a URL — pass", "pass --allow-download HOST for the hosts you trust"),
    ("pixels, over the limit", "raise --max-pixels if the image is genuine"),
)


def _key(reason: str) -> str:
    """``reason`` without what names the one task (the reference before ``: ``, numbers)."""
    head, sep, rest = reason.partition(": ")
    what = rest if sep and ("/" in head or "." in head or head.startswith("task")) else reason
    return _NUMBER.sub("N", what)[:160]


def fix_of(reason: str, root: str | os.PathLike[str] | None) -> str:
    """The fix for ``reason`` (empty when the reason already says it)."""
    if " — " in reason:
        return ""
    for phrase, fix in FIXES:
        if phrase in reason:
            return fix.format(root=root if root is not None else "(the export's folder)")
    return ""


def commonest(path: str | os.PathLike[str], root: str | os.PathLike[str] | None,
              k: int = 3) -> list[tuple[int, str, str]]:
    """Up to ``k`` (count, an example reason, its fix) of ``path`` (``rejected.jsonl``), the
    commonest first."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return []
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for line in lines:
        try:
            reason = str(orjson.loads(line).get("reason", ""))
        except (orjson.JSONDecodeError, AttributeError):
            continue
        key = _key(reason)
        counts[key] += 1
        example.setdefault(key, reason)
    return [(n, example[key][:300], fix_of(example[key], root))
            for key, n in counts.most_common(k)]
