"""Downloads honour HTTP_PROXY / HTTPS_PROXY / NO_PROXY as urllib and requests do (issue 15),
while --allow-download still judges the target host, never the proxy. A tiny forwarding
proxy (absolute-URI GET and CONNECT) and the image servers all listen on 127.0.0.1 only."""

from __future__ import annotations

import base64
import datetime
import http.client
import http.server
import io
import ipaddress
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, fetch, load_image, resolve_image

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
              "https_proxy", "all_proxy", "no_proxy", "REQUEST_METHOD")


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (30, 60, 90)).save(buf, format="PNG")
    return buf.getvalue()


PNG = _png()


class _Server6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _serve(handler: type[http.server.BaseHTTPRequestHandler],
           tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
           ) -> http.server.ThreadingHTTPServer:
    kind = _Server6 if ":" in host else http.server.ThreadingHTTPServer
    srv = kind((host, 0), handler)
    srv.daemon_threads = True
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class _Origin(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.path)
        port = self.server.server_address[1]
        if self.path.split("?")[0] == "/pic.png":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)
            return
        self.send_response(302)
        self.send_header("Location", f"http://localhost:{port}/pic.png")
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Proxy:
    """Forwards absolute-URI GETs and CONNECT tunnels to 127.0.0.1 only; records each."""

    def __init__(self, auth: str | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _refuse(self, code: int) -> bool:
                outer.seen.append((self.command, self.path,
                                   self.headers.get("Proxy-Authorization")))
                if auth is not None and self.headers.get("Proxy-Authorization") != auth:
                    self.send_response(407)
                    self.send_header("Proxy-Authenticate", "Basic")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                if code:
                    self.send_response(code)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802
                u = urlsplit(self.path)
                if self._refuse(0 if u.scheme == "http" and u.hostname == "127.0.0.1" else 403):
                    return
                up = http.client.HTTPConnection("127.0.0.1", u.port, timeout=5)
                up.request("GET", u.path + (f"?{u.query}" if u.query else ""),
                           headers={"Host": self.headers["Host"]})
                r = up.getresponse()
                body = r.read()
                self.send_response(r.status)
                if r.getheader("Location"):
                    self.send_header("Location", r.getheader("Location") or "")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                up.close()

            def do_CONNECT(self) -> None:  # noqa: N802
                host, _, port = self.path.rpartition(":")
                if self._refuse(0 if host in ("127.0.0.1", "[::1]") else 403):
                    return
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
                self.send_response(200, "Connection established")
                self.end_headers()
                pair = [self.connection, upstream]
                try:
                    while True:
                        ready, _, _ = select.select(pair, [], [], 5)
                        if not ready:
                            break
                        for s in ready:
                            data = s.recv(65536)
                            if not data:
                                return
                            (upstream if s is self.connection else self.connection).sendall(data)
                finally:
                    upstream.close()
                    self.close_connection = True

        self.srv = _serve(Handler)
        self.port = self.srv.server_address[1]

    def requests(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.seen]


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture()
def origin() -> Iterator[tuple[http.server.ThreadingHTTPServer, list[str]]]:
    hits: list[str] = []
    srv = _serve(type("Origin", (_Origin,), {"hits": hits}))
    yield srv, hits
    srv.shutdown()
    srv.server_close()


def _opts(tmp_path: Path, hosts: str) -> ImageOptions:
    return ImageOptions(allow_download=hosts, cache_dir=tmp_path / "cache", timeout=5)


def test_http_downloads_go_through_the_proxy_and_no_proxy_bypasses_it(
        env: pytest.MonkeyPatch, tmp_path: Path,
        origin: tuple[http.server.ThreadingHTTPServer, list[str]]) -> None:
    srv, hits = origin
    port = srv.server_address[1]
    proxy = _Proxy()
    env.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    url = f"http://127.0.0.1:{port}/pic.png"
    assert load_image(resolve_image(url, _opts(tmp_path, "127.0.0.1"))).shape == (6, 8, 3)
    assert proxy.requests() == [("GET", url)] and hits == ["/pic.png"]
    # the allow-list judges the target: naming only the proxy allows nothing
    with pytest.raises(ImageError, match="host 127.0.0.1 is not one that allow_download="):
        resolve_image(url + "?again", _opts(tmp_path, f"127.0.0.1:{proxy.port}"))
    # a redirect (through the proxy) to a host not named is refused before it is asked for
    with pytest.raises(ImageError, match="redirects to host localhost"):
        resolve_image(f"http://127.0.0.1:{port}/elsewhere", _opts(tmp_path, "127.0.0.1"))
    assert proxy.requests() == [("GET", url), ("GET", f"http://127.0.0.1:{port}/elsewhere")]
    # NO_PROXY names the host (or its network): straight to it, the proxy never asked
    for no_proxy in ("127.0.0.1", f"example.com, 127.0.0.1:{port}", "127.0.0.0/8", "*"):
        env.setenv("NO_PROXY", no_proxy)
        p = resolve_image(f"{url}?{len(no_proxy)}", _opts(tmp_path / no_proxy[:3], "127.0.0.1"))
        assert load_image(p).shape == (6, 8, 3)
    assert len(proxy.seen) == 2 and len(hits) == 2 + 4
    env.setenv("NO_PROXY", f"127.0.0.1:{port + 1},localhost")  # another port: proxied
    resolve_image(url + "?other-port", _opts(tmp_path, "127.0.0.1"))
    assert len(proxy.seen) == 3
    env.delenv("NO_PROXY")
    env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # only https URLs would use that one
    env.delenv("HTTP_PROXY")
    resolve_image(url + "?direct", _opts(tmp_path, "127.0.0.1"))
    assert len(proxy.seen) == 3
    proxy.srv.shutdown()


def test_proxy_credentials_are_sent_and_never_shown(
        env: pytest.MonkeyPatch, tmp_path: Path,
        origin: tuple[http.server.ThreadingHTTPServer, list[str]]) -> None:
    srv, _ = origin
    want = "Basic " + base64.b64encode(b"alice:s3cr3t@pw").decode()
    proxy = _Proxy(auth=want)
    url = f"http://127.0.0.1:{srv.server_address[1]}/pic.png"
    env.setenv("http_proxy", f"http://alice:s3cr3t%40pw@127.0.0.1:{proxy.port}")
    assert load_image(resolve_image(url, _opts(tmp_path, "127.0.0.1"))).shape == (6, 8, 3)
    assert proxy.seen[-1][2] == want
    env.setenv("http_proxy", f"http://alice:wrongPassw0rd@127.0.0.1:{proxy.port}")
    with pytest.raises(ImageError, match=rf"HTTP 407 .* through proxy 127.0.0.1:{proxy.port}"
                       ) as e:
        resolve_image(url + "?x", _opts(tmp_path, "127.0.0.1"))
    assert "wrongPassw0rd" not in str(e.value) and "\n" not in str(e.value)
    env.setenv("http_proxy", "socks5://bob:hiddenPw99@127.0.0.1:1080")
    with pytest.raises(ImageError, match="only plain http proxies") as e:
        resolve_image(url + "?y", _opts(tmp_path, "127.0.0.1"))
    assert "hiddenPw99" not in str(e.value)
    proxy.srv.shutdown()


def _self_signed(tmp_path: Path, ip: str = "127.0.0.1") -> tuple[Path, ssl.SSLContext]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem, key_pem = tmp_path / "cert.pem", tmp_path / "key.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pem, key_pem)
    return pem, ctx


def test_https_goes_through_a_connect_tunnel_with_tls_checked_end_to_end(
        env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pem, ctx = _self_signed(tmp_path)
    hits: list[str] = []
    srv = _serve(type("TlsOrigin", (_Origin,), {"hits": hits}), tls=ctx)
    port = srv.server_address[1]
    proxy = _Proxy()
    env.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")  # no scheme: http, as urllib reads it
    url = f"https://127.0.0.1:{port}/pic.png"
    with pytest.raises(ImageError, match=r"certificate verify failed.* through proxy"):
        resolve_image(url, _opts(tmp_path, "127.0.0.1"))  # the target's certificate is checked
    env.setenv("SSL_CERT_FILE", str(pem))  # now trusted: the download goes through
    assert load_image(resolve_image(url, _opts(tmp_path, "127.0.0.1"))).shape == (6, 8, 3)
    assert proxy.requests() == [("CONNECT", f"127.0.0.1:{port}")] * 2 and hits == ["/pic.png"]
    assert fetch.proxy_for("https://127.0.0.1/x") == ("127.0.0.1", proxy.port, {})
    assert fetch.proxy_for("http://127.0.0.1/x") is None  # no HTTP_PROXY: direct
    srv.shutdown()
    proxy.srv.shutdown()


def test_an_ipv6_target_is_tunnelled_with_its_brackets(env: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """``CONNECT [::1]:PORT`` (Python < 3.12's set_tunnel would send ``CONNECT ::1:PORT``,
    which proxies refuse), TLS checked against the IPv6 address, Host header bracketed."""
    pem, ctx = _self_signed(tmp_path, "::1")
    hosts: list[str | None] = []

    class Origin6(_Origin):
        def do_GET(self) -> None:  # noqa: N802
            hosts.append(self.headers.get("Host"))
            super().do_GET()

    hits: list[str] = []
    srv = _serve(type("TlsOrigin6", (Origin6,), {"hits": hits}), tls=ctx, host="::1")
    port = srv.server_address[1]
    proxy = _Proxy()
    env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    env.setenv("SSL_CERT_FILE", str(pem))
    url = f"https://[::1]:{port}/pic.png?v6"
    assert load_image(resolve_image(url, _opts(tmp_path, "[::1]"))).shape == (6, 8, 3)
    assert proxy.requests() == [("CONNECT", f"[::1]:{port}")]
    assert hits == ["/pic.png?v6"] and hosts == [f"[::1]:{port}"]
    # a proxy that refuses the tunnel: one line naming the status and the proxy
    env.setenv("HTTPS_PROXY", f"http://nobody:pw0rdSecret@127.0.0.1:{_Proxy(auth='x').port}")
    with pytest.raises(ImageError, match=r"Tunnel connection failed: 407 .* through proxy"
                       ) as e:
        resolve_image(url + "&again", _opts(tmp_path, "[::1]"))
    assert "pw0rdSecret" not in str(e.value) and "\n" not in str(e.value)
    srv.shutdown()
    proxy.srv.shutdown()
