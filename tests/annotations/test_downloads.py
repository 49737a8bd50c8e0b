"""Confinement and safe downloads (issue 15.4): absolute paths and ``file://`` only under the
images root; downloads only from the hosts named, with a size cap, timeouts, no redirects off
those hosts, and a per-user 0700 cache whose entries are verified before use. Every download
test talks to a real HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import http.server
import io
import json
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, fetch, load_image, resolve_image
from npu_data.errors import UserError


def _png_bytes(color: tuple[int, int, int] = (200, 100, 50)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, format="PNG")
    return buf.getvalue()


PNG = _png_bytes()


class _Server:
    """A local HTTP server whose routes exercise every download rule; counts the hits."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.body = PNG
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None,
                      length: int | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                server.hits[path] += 1
                port = self.server.server_address[1]
                if path == "/pic.png":
                    self._send(200, server.body, {"Content-Type": "image/png"})
                elif path == "/to-same":
                    self._send(302, headers={"Location": "/pic.png"})
                elif path == "/to-other":  # same server, but a host the user did not name
                    self._send(302, headers={"Location": f"http://localhost:{port}/pic.png"})
                elif path == "/big":  # declares more than the cap
                    self._send(200, b"x" * 10, length=10 << 20)
                elif path == "/big-unsized":  # no Content-Length: the cap stops the read
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    try:
                        for _ in range(1024):  # 64 MiB if nobody stopped reading
                            self.wfile.write(b"x" * (64 << 10))
                            server.hits["big-chunks"] += 1
                    except OSError:
                        pass
                elif path == "/slow":
                    time.sleep(1.5)
                    self._send(200, PNG)
                elif path == "/short":  # promises 1000 bytes, sends 10 and hangs up
                    self._send(200, b"0123456789", length=1000)
                    self.close_connection = True
                else:
                    self._send(404, b"no")

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture()
def server() -> Iterator[_Server]:
    s = _Server()
    try:
        yield s
    finally:
        s.close()


def _opts(tmp_path: Path, hosts: object = "127.0.0.1", **kw: object) -> ImageOptions:
    return ImageOptions(allow_download=hosts, cache_dir=tmp_path / "cache", **kw)  # type: ignore[arg-type]


# --- confinement ---------------------------------------------------------------------------

def test_absolute_and_file_references_only_under_the_images_root(tmp_path: Path) -> None:
    root = tmp_path / "imgs"
    (root / "sub").mkdir(parents=True)
    inside = root / "sub" / "a b.png"
    inside.write_bytes(PNG)
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    opts = ImageOptions(images_root=root)
    assert resolve_image(str(inside), opts) == inside
    assert resolve_image("file://" + str(inside).replace(" ", "%20"), opts) == inside
    assert resolve_image("file://localhost" + str(inside), opts) == inside
    for ref in (str(secret), "file://" + str(secret), "/etc/passwd", "file:///etc/passwd",
                str(root / ".." / "secret.png"), "../secret.png", "sub/../../secret.png",
                "file://" + str(root) + "/../secret.png"):
        with pytest.raises(ImageError, match=r"outside the images root .* images_root="):
            resolve_image(ref, opts)
    with pytest.raises(ImageError, match="another machine"):
        resolve_image("file://fileserver/share/x.png", opts)
    with pytest.raises(ImageError, match="pass images_root="):
        resolve_image(str(inside), ImageOptions())  # no root: absolute paths are refused
    # the user's own symlink inside the root is theirs to follow
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.png").write_bytes(PNG)
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    assert load_image(resolve_image("linked/c.png", opts)).shape == (6, 8, 3)


def test_refusal_names_the_task_and_the_fix(tmp_path: Path) -> None:
    from npu_data.shards.writer import WriteOptions, write_dataset

    export = tmp_path / "proj" / "export.json"
    export.parent.mkdir()
    (tmp_path / "proj" / "ok.png").write_bytes(PNG)
    (tmp_path / "outside.png").write_bytes(PNG)
    tasks = [{"id": 11, "data": {"image": "ok.png"}, "annotations": []},
             {"id": 12, "data": {"image": str(tmp_path / "outside.png")}, "annotations": []},
             {"id": 13, "data": {"image": "file:///etc/hostname"}, "annotations": []}]
    export.write_text(json.dumps(tasks))
    from npu_data.shards.source import image_options

    s = write_dataset(export, tmp_path / "ds", WriteOptions(images=image_options(export)))
    assert (s.samples, s.rejected) == (1, 2)
    rows = [json.loads(x) for x in (tmp_path / "ds" / "rejected.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [12, 13]
    for r in rows:
        assert "\n" not in r["reason"] and "images_root=" in r["reason"]
        assert "outside the images root" in r["reason"]
    bare = write_dataset(export, tmp_path / "ds3", WriteOptions())  # no image options: the
    assert (bare.samples, bare.rejected) == (1, 2)  # export's folder is the root all the same
    with pytest.raises(UserError, match=r"^task 12 \(#1\): .*outside the images root"):
        write_dataset(export, tmp_path / "ds2",
                      WriteOptions(images=image_options(export), strict=True))


# --- hosts ---------------------------------------------------------------------------------

def test_hosts_must_be_named() -> None:
    with pytest.raises(UserError, match="name them"):
        ImageOptions(allow_download=True)
    assert ImageOptions(allow_download="A.example.com, b.example.com:8443").allow_download == (
        "a.example.com", "b.example.com:8443")
    assert ImageOptions(allow_download=["x.org", "y.org,x.org"]).allow_download == (
        "x.org", "y.org")
    for bad in ("*", "http://x.org/a", "user@x.org"):
        with pytest.raises(UserError, match="name a host"):
            ImageOptions(allow_download=bad)
    ok = ("cdn.example.com", "*.images.example.org", "127.0.0.1:8080", "[::1]:9000")
    for url in ("https://cdn.example.com/a.jpg", "http://a.b.images.example.org/x",
                "http://127.0.0.1:8080/x", "http://[::1]:9000/x"):
        assert fetch.host_allowed(url, ok), url
    for url in ("https://evil.com/cdn.example.com/a.jpg", "https://cdn.example.com.evil.com/",
                "http://images.example.org/x", "http://127.0.0.1:8081/x", "http://[::1]/x",
                "https://xcdn.example.com/", "http://127.0.0.1/x"):
        assert not fetch.host_allowed(url, ok), url


def test_only_named_hosts_are_contacted(tmp_path: Path, server: _Server) -> None:
    opts = _opts(tmp_path)
    p = resolve_image(server.url("/pic.png"), opts)
    assert load_image(p)[0, 0].tolist() == [200, 100, 50]
    with pytest.raises(ImageError, match=r"host localhost is not one that allow_download= "
                                         r"names \(127\.0\.0\.1\) — refused"):
        resolve_image(server.url("/pic.png?other", host="localhost"), opts)
    with pytest.raises(ImageError, match=r"pass allow_download= 127\.0\.0\.1 to fetch"):
        resolve_image(server.url("/pic.png?x"), ImageOptions(cache_dir=tmp_path / "c2"))
    wrong_port = _opts(tmp_path, f"127.0.0.1:{server.port + 1}")
    with pytest.raises(ImageError, match="not one that allow_download= names"):
        resolve_image(server.url("/pic.png?y"), wrong_port)
    assert server.hits["/pic.png"] == 1  # the refused ones never reached the server
    assert load_image(resolve_image(server.url("/pic.png"),
                                    _opts(tmp_path, f"127.0.0.1:{server.port}"))).shape == (6, 8, 3)


def test_redirects_stay_on_named_hosts(tmp_path: Path, server: _Server) -> None:
    opts = _opts(tmp_path)
    assert load_image(resolve_image(server.url("/to-same"), opts)).shape == (6, 8, 3)
    with pytest.raises(ImageError, match="redirects to host localhost, which allow_download= "
                                         "does not name — refused"):
        resolve_image(server.url("/to-other"), opts)
    assert server.hits["/pic.png"] == 1  # only the same-host redirect was followed
    both = _opts(tmp_path, "127.0.0.1,localhost")  # the user may name the target too
    assert load_image(resolve_image(server.url("/to-other"), both)).shape == (6, 8, 3)


def test_size_cap_timeouts_and_truncation(tmp_path: Path, server: _Server) -> None:
    small = _opts(tmp_path, max_download_bytes=1 << 20, timeout=5)
    with pytest.raises(ImageError, match=r"10485760 bytes is larger than the download cap of "
                                         r"1 MiB — refused \(raise max_download_bytes="):
        resolve_image(server.url("/big"), small)
    with pytest.raises(ImageError, match="larger than the download cap of 1 MiB"):
        resolve_image(server.url("/big-unsized"), small)
    assert server.hits["big-chunks"] < 1024  # reading stopped past the cap
    t0 = time.monotonic()
    with pytest.raises(ImageError, match=r"timed out \(no answer within 0.3 s\) — raise "
                                         "timeout= for a slow server"):
        resolve_image(server.url("/slow"), _opts(tmp_path, timeout=0.3))
    assert time.monotonic() - t0 < 1.4
    with pytest.raises(ImageError, match="truncated"):
        resolve_image(server.url("/short"), small)
    with pytest.raises(ImageError, match=r"download failed \(HTTP 404"):
        resolve_image(server.url("/missing.png"), small)
    cache = tmp_path / "cache"
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".json")] == []  # nothing kept


# --- the cache -----------------------------------------------------------------------------

def test_cache_is_private_and_verified(tmp_path: Path, server: _Server,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "user-cache"))
    opts = ImageOptions(allow_download="127.0.0.1")
    url = server.url("/pic.png")
    p = resolve_image(url, opts)
    assert p.parent == tmp_path / "user-cache" / "downloads"
    assert stat.S_IMODE(os.stat(p.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    meta = json.loads(p.with_name(p.name + ".json").read_text())
    assert meta["size"] == len(PNG) and len(meta["sha256"]) == 64
    assert resolve_image(url, opts) == p and server.hits["/pic.png"] == 1  # verified hit
    # tampered (same size), truncated, record missing, replaced by a symlink: fetched again
    server.body = _png_bytes((1, 2, 3))
    p.write_bytes(bytes(len(PNG)))
    assert load_image(resolve_image(url, opts))[0, 0].tolist() == [1, 2, 3]
    assert server.hits["/pic.png"] == 2
    p.write_bytes(p.read_bytes()[:20])
    assert load_image(resolve_image(url, opts))[0, 0].tolist() == [1, 2, 3]
    p.with_name(p.name + ".json").unlink()
    resolve_image(url, opts)
    p.unlink()
    p.symlink_to(tmp_path / "elsewhere.png")
    (tmp_path / "elsewhere.png").write_bytes(server.body)
    resolve_image(url, opts)
    assert not p.is_symlink() and server.hits["/pic.png"] == 5
    # a cache folder found open is never changed (its entries are 0600): used when only
    # readable by others, refused when others can write it; one that is not a folder is refused
    os.chmod(p.parent, 0o755)
    resolve_image(url, opts)
    assert stat.S_IMODE(os.stat(p.parent).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    os.chmod(p.parent, 0o777)
    with pytest.raises(UserError, match="writable by others"):
        resolve_image(url, opts)
    assert stat.S_IMODE(os.stat(p.parent).st_mode) == 0o777
    os.chmod(p.parent, 0o700)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        resolve_image(url, ImageOptions(allow_download="127.0.0.1", cache_dir=tmp_path / "file"))
    monkeypatch.delenv("NPU_DATA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch.default_cache_dir() == tmp_path / "xdg" / "npu-data" / "downloads"


def test_cli_names_hosts(tmp_path: Path, server: _Server, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.cli import main
    from npu_data.shards.reader import ShardDataset

    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "cache"))
    export = tmp_path / "export.json"
    export.write_text(json.dumps([
        {"id": 1, "data": {"image": server.url("/pic.png")}, "annotations": []},
        {"id": 2, "data": {"image": server.url("/pic.png", host="localhost")},
         "annotations": []}]))
    assert main(["import", str(export), "--out", str(tmp_path / "a"), "--allow-download"]) == 1
    err = capsys.readouterr().err
    assert "--allow-download needs the hosts" in err and err.count("\n") == 1
    assert main(["import", str(export), "--out", str(tmp_path / "b"),
                 "--allow-download", "127.0.0.1", "--max-download-mb", "1",
                 "--max-rejected", "1"]) == 0
    assert "imported 1 of 2 tasks" in capsys.readouterr().out
    np.testing.assert_array_equal(ShardDataset(tmp_path / "b")[0]["image"][0, 0], [200, 100, 50])
    rej = json.loads((tmp_path / "b" / "rejected.jsonl").read_text())
    assert rej["task_id"] == 2 and "host localhost is not one" in rej["reason"]


def test_signed_urls_are_redacted_in_reasons(tmp_path: Path, server: _Server) -> None:
    url = server.url("/missing.png") + "?X-Amz-Credential=AKIAEXAMPLE%2F2024&X-Amz-Signature=abc123"
    with pytest.raises(ImageError) as e:
        resolve_image(url, _opts(tmp_path))
    assert "AKIAEXAMPLE" not in e.value.reason and "abc123" not in e.value.reason
    assert "X-Amz-Signature=REDACTED" in e.value.reason


def test_a_cached_copy_obeys_the_cap_it_is_asked_under(tmp_path: Path, server: _Server) -> None:
    url = server.url("/pic.png")
    assert load_image(resolve_image(url, _opts(tmp_path))).shape == (6, 8, 3)
    with pytest.raises(ImageError, match="larger than the download cap"):
        resolve_image(url, _opts(tmp_path, max_download_bytes=len(PNG) - 1))
    assert server.hits["/pic.png"] == 2  # asked again under the smaller cap, and refused
    assert load_image(resolve_image(url, _opts(tmp_path))).shape == (6, 8, 3)
