"""The remote tests' constants (the S3 server itself: ``tests/s3_server.py``, served once per
session by the ``s3`` fixture of tests/conftest.py)."""

from tests.s3_server import BUCKET, KEY, SECRET, N

__all__ = ["BUCKET", "KEY", "N", "SECRET"]
