"""No secret on disk or on screen (issue 15): presigned URLs, Label Studio storage links and
``user:password@`` URLs are stored and shown redacted — scheme, host and path kept — in the
shards' ``image_ref``/``data_json``, the manifest, rejected.jsonl, the cache and every message,
while the download itself uses the full URL. Images come from a local HTTP server on
127.0.0.1 that checks it received the signature."""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, resolve_image
from npu_data.annotations.redact import redact_columns, redact_json, redact_text, redact_url
from npu_data.errors import UserError

SIG = "9d2c6e1f" * 8  # an AWS SigV4 signature is 64 hex digits
KEY_ID = "AKIALOCALTESTKEY7Q2W"
TOKEN = "FQoGZXIvYXdzEXAMPLEsessionTOKENvalue0123"
SAS_SIG = "Zm9vYmFyYmF6cXV4+/secretSAS="
PASSWORD = "hunter2-Pa55word"
SECRETS = (SIG, KEY_ID, TOKEN, SAS_SIG, quote(SAS_SIG, safe=""), PASSWORD)


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (5, 4), color).save(buf, format="PNG")
    return buf.getvalue()


PATHS = {"/b/red.png": (250, 0, 0), "/b/green.png": (0, 250, 0), "/b/blue.png": (0, 0, 250),
         "/b/my%20file.png": (9, 99, 199)}


class _Signed:
    """Serves ``/b/<name>.png`` only with the expected signature in the query (as S3 does)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer.seen.append(self.path)
                path, _, query = self.path.partition("?")
                q = parse_qs(query)  # S3 checks the signature over the query as decoded
                signed = (q.get("X-Amz-Signature") == [SIG] and q.get("X-Amz-Credential") == [
                    f"{KEY_ID}/20260101/us-east-1/s3/aws4_request"]) or q.get("sig") == [SAS_SIG]
                ok = path in PATHS and (signed or path == "/b/blue.png")
                body = _png(PATHS[path]) if ok else b"SignatureDoesNotMatch"
                self.send_response(200 if ok else 403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.host = f"127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def aws(self, path: str, sig: str = SIG) -> str:
        return (f"http://{self.host}{path}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                f"{KEY_ID}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z"
                f"&X-Amz-Expires=3600&X-Amz-Security-Token={TOKEN}&X-Amz-SignedHeaders=host"
                f"&X-Amz-Signature={sig}")

    def sas(self, path: str) -> str:
        return (f"http://{self.host}{path}?sv=2021-08-06&se=2026-01-01T00%3A00%3A00Z&sr=b&sp=r"
                f"&sig={quote(SAS_SIG, safe='')}")


@pytest.fixture()
def signed() -> Iterator[_Signed]:
    s = _Signed()
    try:
        yield s
    finally:
        s.srv.shutdown()
        s.srv.server_close()


def _all_bytes(*folders: Path) -> bytes:
    return b"".join(p.read_bytes() for f in folders for p in sorted(f.rglob("*"))
                    if p.is_file())


def _assert_clean(blob: bytes | str) -> None:
    data = blob.encode() if isinstance(blob, str) else blob
    for secret in SECRETS:
        assert secret.encode() not in data, secret
    b64 = base64.urlsafe_b64encode(f"s3://bkt/{SIG}".encode())
    assert b64 not in data


# --- the one function -----------------------------------------------------------------------

def test_redact_url_keeps_the_object_and_hides_every_secret() -> None:
    cases = {
        "https://bkt.s3.eu-west-1.amazonaws.com/a/b%20c.jpg?X-Amz-Credential=AK%2F1"
        "&X-Amz-Signature=ab12": "https://bkt.s3.eu-west-1.amazonaws.com/a/b%20c.jpg?"
        "X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED",
        "https://s3.amazonaws.com/b/k.png?AWSAccessKeyId=AK&Expires=1&Signature=s%2B":
            "https://s3.amazonaws.com/b/k.png?AWSAccessKeyId=REDACTED&Expires=REDACTED"
            "&Signature=REDACTED",
        "https://d.obs.cn-north-4.myhuaweicloud.com/x.jpg?AccessKeyId=AK&Signature=s":
            "https://d.obs.cn-north-4.myhuaweicloud.com/x.jpg?AccessKeyId=REDACTED"
            "&Signature=REDACTED",
        "https://storage.googleapis.com/g/p.jpg?X-Goog-Credential=c&X-Goog-Signature=z":
            "https://storage.googleapis.com/g/p.jpg?X-Goog-Credential=REDACTED"
            "&X-Goog-Signature=REDACTED",
        "https://ac.blob.core.windows.net/c/e.jpg?sv=2020&se=2026&sig=z%3D":
            "https://ac.blob.core.windows.net/c/e.jpg?sv=REDACTED&se=REDACTED&sig=REDACTED",
        "https://cdn.example.com/a.jpg?token=t0k&w=200":
            "https://cdn.example.com/a.jpg?token=REDACTED&w=REDACTED",
        "https://maps.example.com/i.png?key=AIzaXYZ": "https://maps.example.com/i.png?key=REDACTED",
        "https://me:pw@host.example.com:8443/x.png": "https://REDACTED@host.example.com:8443/x.png",
        "/tasks/3/resolve/?fileuri=czM6Ly9iL2s=": "/tasks/3/resolve/?fileuri=REDACTED",
        "http://ls:8080/projects/9/presign/?fileuri=s3%3A%2F%2Fb%2Fk":
            "http://ls:8080/projects/9/presign/?fileuri=REDACTED",
        "https://x.example.com/a.png#access_token=abc": "https://x.example.com/a.png#"
                                                        "access_token=REDACTED",
    }
    for ref, want in cases.items():
        assert redact_url(ref) == want, ref
    # nothing secret: left exactly as written
    for ref in ("s3://bkt/photos/a b.png", "/data/local-files/?d=imgs%2Fa.png", "a?b.png",
                "photos/me@home.png", "https://cdn.example.com/a.jpg?w=200", "C:\\imgs\\a.png",
                "/data/upload/1/ab-c.png", "file:///data/x.png"):
        assert redact_url(ref) == ref


def test_messages_and_task_json_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envSecretValue/123")
    msg = (f"task 3: https://h.example.com/k.png?X-Amz-Signature={SIG} (HTTP 403); retry "
           f"Credential={KEY_ID}/2026, X-Amz-Security-Token={TOKEN}) with envSecretValue/123")
    out = redact_text(msg)
    _assert_clean(out)
    assert "envSecretValue" not in out and "https://h.example.com/k.png?" in out
    assert out.endswith(") with REDACTED") and "(HTTP 403)" in out
    raw = json.dumps({"image": f"https://u:{PASSWORD}@h.example.com/a.png",
                      "extra": [{"thumb": f"https://h.example.com/t.png?sig={SAS_SIG}"}],
                      "n": 3}).encode()
    clean = json.loads(redact_json(raw))
    assert clean == {"image": "https://REDACTED@h.example.com/a.png",
                     "extra": [{"thumb": "https://h.example.com/t.png?sig=REDACTED"}], "n": 3}
    plain = b'{"image": "photos/a?b.png", "caption": "a cat? key=3, token=no", "w": 1}'
    assert redact_json(plain) == plain  # untouched bytes when nothing is secret


@pytest.mark.parametrize("unit", ["a", "a1", "key", "k=", "key=", "a://", "1://", "/tasks/1/",
                                  "x-amz-", "a@", "s3://k:p@"])
def test_redact_text_is_linear_in_its_input(unit: str) -> None:
    """A megabyte of any repeated piece (a lease owner, a server's message) is redacted in
    well under a second of work per megabyte (a quadratic scan took minutes), and a secret
    after it is still hidden."""
    import time

    msg = unit * (1_000_000 // len(unit)) + f" https://u:{PASSWORD}@h/x token={TOKEN}"
    start = time.process_time()
    out = redact_text(msg)
    assert time.process_time() - start < 5.0
    assert PASSWORD not in out and TOKEN not in out


def test_redact_columns_rewrites_only_the_reference_columns() -> None:
    refs = [f"https://h/a.png?Signature={SIG}", "plain.png", "ü/é.png"]
    data = [b'{"image":"x"}', json.dumps({"image": refs[0]}).encode(), b"{}"]

    def text(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        offs = np.zeros(len(values) + 1, np.int64)
        np.cumsum([len(v) for v in values], out=offs[1:])
        return np.frombuffer(b"".join(values), np.uint8), offs

    cols: dict[str, np.ndarray] = {"task_id": np.arange(3)}
    cols["image_ref.bytes"], cols["image_ref.offsets"] = text([r.encode() for r in refs])
    cols["data_json.bytes"], cols["data_json.offsets"] = text(data)
    out = redact_columns(cols)
    assert out["task_id"] is cols["task_id"]
    offs = out["image_ref.offsets"]
    got = [bytes(out["image_ref.bytes"][a:b]).decode()
           for a, b in zip(offs[:-1], offs[1:], strict=True)]
    assert got == ["https://h/a.png?Signature=REDACTED", "plain.png", "ü/é.png"]
    _assert_clean(out["data_json.bytes"].tobytes())
    assert out["data_json.offsets"][-1] == len(out["data_json.bytes"])


# --- an import of presigned URLs ----------------------------------------------------------

def test_import_of_presigned_urls_leaves_no_secret_anywhere(
        signed: _Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.cli import main
    from npu_data.shards.reader import ShardDataset

    cache = tmp_path / "user-cache"
    monkeypatch.setenv("NPU_DATA_CACHE", str(cache))
    host = signed.host
    refs = [signed.aws("/b/red.png"), signed.sas("/b/green.png"),
            f"http://me:{PASSWORD}@{host}/b/blue.png",
            signed.aws("/b/red.png", sig="0" * 64),          # a wrong signature: 403
            signed.aws("/b/missing.png")]
    tasks = [{"id": i + 1, "data": {"image": r, "thumb": signed.sas("/b/t.png"),
                                    "source": f"/tasks/{i}/resolve/?fileuri="
                                              + base64.urlsafe_b64encode(
                                                  f"s3://bkt/{SIG}".encode()).decode()},
              "annotations": []} for i, r in enumerate(refs)]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks))
    out = tmp_path / "ds"
    assert main(["import", str(export), "--out", str(out), "--allow-download", host,
                 "--max-rejected", "2"]) == 0
    stdout, stderr = capsys.readouterr()
    assert "imported 3 of 5 tasks" in stdout
    assert any(SIG in p for p in signed.seen)  # the download itself was signed
    ds = ShardDataset(out)
    assert [ds[i]["image"][0, 0].tolist() for i in range(3)] == [[250, 0, 0], [0, 250, 0],
                                                                  [0, 0, 250]]
    _assert_clean(_all_bytes(out, cache))
    _assert_clean(stdout + stderr)
    stored = _all_bytes(out)
    assert f"http://{host}/b/red.png?X-Amz-Algorithm=REDACTED".encode() in stored
    assert f"http://REDACTED@{host}/b/blue.png".encode() in stored
    assert b"/tasks/0/resolve/?fileuri=REDACTED" in stored  # data_json too
    rows = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [4, 5]
    assert all("HTTP 403" in r["reason"] and "X-Amz-Signature=REDACTED" in r["reason"]
               and f"http://{host}/b/" in r["reason"] for r in rows)

    # --strict: the failing presigned download is the error, redacted as well
    assert main(["import", str(export), "--out", str(tmp_path / "s"), "--allow-download", host,
                 "--strict"]) == 1
    err = capsys.readouterr().err
    assert "task 4 (#3)" in err and "HTTP 403" in err and err.count("\n") == 1
    _assert_clean(err)
    _assert_clean(_all_bytes(tmp_path / "s", cache))


def test_errors_for_signed_urls_are_redacted(signed: _Signed, tmp_path: Path) -> None:
    opts = ImageOptions(allow_download=signed.host, cache_dir=tmp_path / "c", timeout=5)
    for ref in (signed.aws("/b/red.png", sig="f" * 64), signed.aws("/b/missing.png"),
                f"http://me:{PASSWORD}@{signed.host}/b/nope.png"):
        with pytest.raises(ImageError) as e:
            resolve_image(ref, opts)
        _assert_clean(str(e.value))
        assert signed.host in str(e.value)
    with pytest.raises(ImageError) as e:  # a host not named: refused, still redacted
        resolve_image(signed.aws("/b/red.png").replace("127.0.0.1", "localhost"), opts)
    _assert_clean(str(e.value))
    assert "not one that allow_download= names" in str(e.value)
    with pytest.raises(UserError) as u:
        ImageOptions(storage_endpoint=f"ftp://{KEY_ID}.example.com/?token={TOKEN}")
    _assert_clean(str(u.value))


def test_every_cli_error_is_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from npu_data.cli import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"https://alice:{PASSWORD}@127.0.0.1:{sock.getsockname()[1]}/ds"
    for argv in (["inspect", str(tmp_path / f"ds?X-Amz-Security-Token={TOKEN}")],
                 ["verify", dead]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
        _assert_clean(err)
        assert "REDACTED" in err


def test_a_doubly_escaped_presigned_url_is_asked_for_once_undone(signed: _Signed,
                                                                 tmp_path: Path) -> None:
    from npu_data.annotations import load_image

    opts = ImageOptions(allow_download=signed.host, cache_dir=tmp_path / "c", timeout=5)
    double = signed.aws("/b/my%20file.png").replace("%", "%25")  # as Label Studio writes it
    assert load_image(resolve_image(double, opts))[0, 0].tolist() == [9, 99, 199]
    assert [p.split("?")[0] for p in signed.seen] == ["/b/my%2520file.png", "/b/my%20file.png"]
    signed.seen.clear()
    with pytest.raises(ImageError, match="HTTP 403") as e:  # not signed: only as written
        resolve_image(f"http://{signed.host}/b/my%2520file.png", opts)
    assert len(signed.seen) == 1
    signed.seen.clear()
    wrong = signed.aws("/b/my%20file.png", sig="e" * 64).replace("%", "%25")
    with pytest.raises(ImageError, match="HTTP 403") as e:  # both refused: the first error
        resolve_image(wrong, opts)
    assert len(signed.seen) == 2 and "/b/my%2520file.png?" in str(e.value)
    _assert_clean(str(e.value))


def test_a_url_given_as_an_allowed_host_is_refused_without_its_secrets() -> None:
    from npu_data.annotations.fetch import parse_hosts

    pw, sig = "Pw" + "Hidden77", "Sig" + "Hidden88"
    with pytest.raises(UserError, match="name a host") as e:
        parse_hosts(f"https://alice:{pw}@img.example.com/x?X-Amz-Signature={sig}")
    assert pw not in str(e.value) and sig not in str(e.value)
    assert "img.example.com" in str(e.value)


def test_container_at_account_is_a_place_not_a_user() -> None:
    assert redact_url("abfs://imgs@acct.dfs.core.windows.net/a.jpg") == (
        "abfs://imgs@acct.dfs.core.windows.net/a.jpg")
    assert redact_url("abfs://u:pw@acct/a.jpg") == "abfs://REDACTED@acct/a.jpg"
    assert redact_url("https://tok3n@host/a.jpg") == "https://REDACTED@host/a.jpg"


@pytest.mark.parametrize("url", [
    f"s3://AKIAKEY:{PASSWORD}@tail7@bucket/x",  # the password holds an @
    f"s3://AKIAKEY:{PASSWORD}/tail7@bucket/x",  # an S3 secret holds a /
    f"s3://AKIAKEY:{PASSWORD}@tail7@bucket/x?X-Amz-Signature={SIG}",
    "s3://AKIAKEY@bucket/x",  # a key id alone
])
def test_url_credentials_follow_one_rule_everywhere(url: str) -> None:
    """The user info ends at the last @ before the host, for every reader of a URL: no part
    of a password or key id is shown, by the API or an SDK's message (refused first)."""
    from npu_data.formats.webdataset.reader import TarAccess, open_stream, shown
    from npu_data.shards.storage import RemoteFolder

    secrets = ("AKIAKEY", PASSWORD, "tail7", SIG)
    shown_forms = [redact_url(url), redact_text(f"reading {url} failed"), shown(url)]
    for call in (lambda: RemoteFolder(url),
                 lambda: open_stream(url, TarAccess(allow_download=["bucket"]))):
        with pytest.raises(UserError, match="credentials do not belong in the URL") as err:
            call()
        shown_forms.append(str(err.value))
    for text in shown_forms:
        assert "bucket/x" in text and not any(s in text for s in secrets), text
    assert redact_url("https://h:8080/img@2x.png") == "https://h:8080/img@2x.png"  # a path's @
    assert redact_url("s3://bucket/a@2x.png") == "s3://bucket/a@2x.png"
