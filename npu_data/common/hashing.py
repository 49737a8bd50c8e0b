"""File digests."""

from __future__ import annotations

import hashlib
import os

CHUNK = 1 << 22


def file_sha256(path: str | os.PathLike[str], chunk: int = CHUNK) -> str:
    """The SHA-256 hex digest of a file, read ``chunk`` bytes at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
