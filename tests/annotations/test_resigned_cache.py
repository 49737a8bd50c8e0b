"""A presigned URL signed again (new X-Amz-Signature / X-Amz-Date / Expires) hits the same
download cache entry (issue 15): asked with the entry's ETag, the server answers 304 and no
body is downloaded; an object that changed is fetched again. A real HTTP server on
127.0.0.1 that honours If-None-Match, as S3 does, and counts the bodies it sends."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageOptions, fetch, load_image, resolve_image
from npu_data.annotations.redact import unsigned_url


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, format="PNG")
    return buf.getvalue()


class _Bucket:
    """Serves /bkt/<name> (any query: the signature is not checked) with an MD5 ETag."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {"/bkt/cat.png": _png((10, 20, 30))}
        self.bodies: list[str] = []  # paths a 200 with a body was sent for
        self.not_modified: list[str] = []
        self.asked: list[str | None] = []  # If-None-Match of each request
        bucket = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                body = bucket.objects[path]
                etag = '"' + hashlib.md5(body).hexdigest() + '"'  # noqa: S324 - as S3 does
                bucket.asked.append(self.headers.get("If-None-Match"))
                if self.headers.get("If-None-Match") == etag:
                    bucket.not_modified.append(path)
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                bucket.bodies.append(path)
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.srv.server_address[1]}"

    def signed(self, path: str, n: int) -> str:
        """``path`` presigned the n-th time (SigV4's query, as boto3 writes it)."""
        return (f"{self.base}{path}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                f"AKIAEXAMPLE%2F2026120{n}%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
                f"2026120{n}T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&"
                f"X-Amz-Signature={hashlib.sha256(bytes([n])).hexdigest()}")


@pytest.fixture()
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Bucket]:
    for var in ("NPU_DATA_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    b = _Bucket()
    yield b
    b.srv.shutdown()
    b.srv.server_close()


def test_a_resigned_url_hits_the_cache_and_a_changed_object_is_fetched_again(
        tmp_path: Path, bucket: _Bucket) -> None:
    opts = ImageOptions(allow_download="127.0.0.1", cache_dir=tmp_path / "cache", timeout=5)
    first = resolve_image(bucket.signed("/bkt/cat.png", 1), opts)
    again = resolve_image(bucket.signed("/bkt/cat.png", 2), opts)  # signed again later
    assert again == first and bucket.bodies == ["/bkt/cat.png"]
    assert bucket.not_modified == ["/bkt/cat.png"] and bucket.asked[1] is not None
    assert tuple(load_image(again)[0, 0]) == (10, 20, 30)
    # the same signed URL once more: the entry is used without asking the server
    assert resolve_image(bucket.signed("/bkt/cat.png", 2), opts) == first
    assert len(bucket.asked) == 2
    # the object changes; a new signing of it is downloaded again, into the same entry
    bucket.objects["/bkt/cat.png"] = _png((200, 0, 0))
    third = resolve_image(bucket.signed("/bkt/cat.png", 3), opts)
    assert third == first and bucket.bodies == ["/bkt/cat.png"] * 2
    assert tuple(load_image(third)[0, 0]) == (200, 0, 0)
    assert not any(b"X-Amz-Signature" in p.read_bytes() or b"AKIAEXAMPLE" in p.read_bytes()
                   for p in (tmp_path / "cache").iterdir())  # no secret in the record
    # another object is another entry
    bucket.objects["/bkt/dog.png"] = _png((0, 0, 99))
    dog = resolve_image(bucket.signed("/bkt/dog.png", 1), opts)
    assert dog != first and tuple(load_image(dog)[0, 0]) == (0, 0, 99)


def test_a_tampered_entry_is_fetched_whole_not_revalidated(tmp_path: Path,
                                                           bucket: _Bucket) -> None:
    opts = ImageOptions(allow_download="127.0.0.1", cache_dir=tmp_path / "cache", timeout=5)
    entry = resolve_image(bucket.signed("/bkt/cat.png", 1), opts)
    data = bytearray(entry.read_bytes())
    data[-20] ^= 0xFF
    entry.write_bytes(bytes(data))  # same size, other bytes: its digest no longer matches
    assert resolve_image(bucket.signed("/bkt/cat.png", 2), opts) == entry
    assert bucket.asked == [None, None] and len(bucket.bodies) == 2  # no If-None-Match sent
    assert tuple(load_image(entry)[0, 0]) == (10, 20, 30)


def test_parallel_signings_of_one_object_share_one_download(tmp_path: Path,
                                                            bucket: _Bucket) -> None:
    from npu_data.annotations.images import prefetch

    opts = ImageOptions(allow_download="127.0.0.1", cache_dir=tmp_path / "cache", timeout=5,
                        download_workers=4)
    got = prefetch([bucket.signed("/bkt/cat.png", n) for n in range(1, 5)], opts)
    assert len(set(got.values())) == 1 and bucket.bodies == ["/bkt/cat.png"]
    assert all(isinstance(p, Path) and np.array_equal(load_image(p)[0, 0], [10, 20, 30])
               for p in got.values())


def test_the_cache_key_drops_only_signing_parameters() -> None:
    a = ("https://b.s3.amazonaws.com/k%2Fx.jpg?versionId=3&X-Amz-Signature=ab&X-Amz-Date=1&"
         "X-Amz-Expires=60&X-Amz-Credential=AK%2Fx&X-Amz-Security-Token=tok")
    assert unsigned_url(a) == "https://b.s3.amazonaws.com/k%2Fx.jpg?versionId=3"
    sas = "https://acct.blob.core.windows.net/c/img.png?sv=2024&se=2026&sp=r&sr=b&sig=abc%3D"
    assert unsigned_url(sas) == "https://acct.blob.core.windows.net/c/img.png"
    obs = "https://bk.obs.example.com/a.jpg?AccessKeyId=AK&Expires=99&Signature=s%2B"
    assert unsigned_url(obs) == "https://bk.obs.example.com/a.jpg"
    plain = "https://cdn.example.com/get?id=7&expires=1&se=2"  # not signed: kept whole
    assert unsigned_url(plain) == plain
    assert fetch.entry_name(unsigned_url(a), "/k.jpg") != fetch.entry_name(
        unsigned_url(a.replace("versionId=3", "versionId=4")), "/k.jpg")
