"""Tars read through the Python API from URLs that carry credentials (a presigned query,
``user:password@``, storage_options keys): no error, repr, printed chain of causes or warning
shows them (issue 15). An HTTP server and moto's S3 server on 127.0.0.1, and a closed port."""

from __future__ import annotations

import http.server
import io
import socket
import tarfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from npu_data.errors import UserError
from npu_data.formats.webdataset import WebDatasetStream
from npu_data.formats.webdataset.reader import TarAccess, iter_tar_samples, wds_to_table
from tests.support.local_http import serving

# written apart so that no source line a traceback prints holds one
PW, KEY, SECRET = "Pw" + "Secret1", "AKIA" + "OPTKEY6", "Opt" + "Secret7"
SECRETS = (PW, "Sig" + "Secret2", "AKIA" + "CREDSECRET3", "Sas" + "Secret4", "Tok" + "Secret5",
           KEY, SECRET)
QUERY = ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIACREDSECRET3%2F20261203%2F"
         "us-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=TokSecret5&X-Amz-Signature="
         "SigSecret2&sig=SasSecret4")


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("a.json", b"{}"), ("a.png", b"\x89PNG" + b"x" * 2000)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TAR = _tar()


def assert_clean(fail: Callable[[], Any]) -> UserError:
    """Run ``fail``; it must raise a one-line UserError whose text, repr and printed chain,
    and every warning meanwhile, hold none of SECRETS."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(UserError) as err:
            fail()
    exc = err.value
    shown = [str(exc), repr(exc), "".join(traceback.format_exception(exc)),
             *(str(w.message) for w in seen)]
    for text in shown:
        for secret in SECRETS:
            assert secret not in text, (secret, text)
    assert "\n" not in str(exc)
    return exc


@pytest.fixture(scope="module")
def web() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            body = {"/good.tar": TAR, "/garbage.tar": b"not a tar " * 200,
                    "/cut.tar": TAR[:2500]}.get(path)
            if body is None:
                self.send_response(404, "Not Found")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(url: str, access: TarAccess) -> None:
    list(iter_tar_samples(url, access))


@pytest.mark.parametrize("path,why", [("missing.tar", "HTTP 404"),
                                      ("garbage.tar", "not a tar file"),
                                      ("cut.tar", "cut off or corrupt")])
def test_http_tar_errors_show_no_credentials(web: str, path: str, why: str,
                                             tmp_path: Any) -> None:
    url = f"http://alice:{PW}@{web}/{path}?{QUERY}"
    access = TarAccess(allow_download="127.0.0.1", timeout=5)
    exc = assert_clean(lambda: _read(url, access))
    assert why in str(exc) and f"{web}/{path}" in str(exc)
    stream = WebDatasetStream([url], allow_download="127.0.0.1", timeout=5)
    assert why in str(assert_clean(lambda: list(stream)))
    assert why in str(assert_clean(lambda: wds_to_table([url], tmp_path, access)))


def test_unreachable_and_refused_tar_urls_show_no_credentials() -> None:
    port = _closed_port()
    url = f"https://alice:{PW}@127.0.0.1:{port}/t.tar?{QUERY}"
    exc = assert_clean(lambda: _read(url, TarAccess(allow_download="127.0.0.1", timeout=5)))
    assert "download failed" in str(exc) and f"127.0.0.1:{port}/t.tar" in str(exc)
    # refused before any request: not allowed, no allow-list, an unknown scheme
    assert_clean(lambda: _read(url, TarAccess(allow_download="example.com")))
    assert_clean(lambda: _read(url, TarAccess()))
    assert_clean(lambda: _read(f"ftp://alice:{PW}@127.0.0.1/t.tar?{QUERY}", TarAccess()))


@pytest.fixture(scope="module")
def moto_s3() -> Iterator[str]:
    import moto.server as moto_server
    import s3fs

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY", "NPU_DATA_S3_ENDPOINT"):
            mp.delenv(var, raising=False)  # the keys come only from storage_options here
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, skip_instance_cache=True,
                               client_kwargs={"endpoint_url": endpoint})
        fs.mkdir("wds-secrets")
        fs.pipe("wds-secrets/garbage.tar", b"not a tar " * 200)
        fs.pipe("wds-secrets/cut.tar", TAR[:2500])
        try:
            yield endpoint
        finally:
            server.stop()


def _s3_access(endpoint: str) -> TarAccess:
    return TarAccess(allow_download="wds-secrets", timeout=5, storage_options={
        "key": KEY, "secret": SECRET, "client_kwargs": {"endpoint_url": endpoint},
        "config_kwargs": {"retries": {"max_attempts": 1}}})


@pytest.mark.parametrize("key,why", [("missing.tar", "no such object"),
                                     ("garbage.tar", "not a tar file"),
                                     ("cut.tar", "cut off or corrupt")])
def test_s3_tar_errors_show_no_credentials(moto_s3: str, key: str, why: str) -> None:
    url = f"s3://wds-secrets/{key}"
    exc = assert_clean(lambda: _read(url, _s3_access(moto_s3)))
    assert why in str(exc) and url in str(exc)


def test_s3_tar_unreachable_endpoint_and_keys_in_the_url(moto_s3: str) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    exc = assert_clean(lambda: _read("s3://wds-secrets/cut.tar", _s3_access(dead)))
    assert "cannot open" in str(exc) and "check the URL, the endpoint" in str(exc)
    exc = assert_clean(lambda: _read(f"s3://{KEY}:{SECRET}@wds-secrets/cut.tar",
                                     _s3_access(moto_s3)))
    assert "credentials do not belong in the URL" in str(exc)
