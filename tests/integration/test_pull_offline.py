"""pull against a small fake server: cut-off downloads leave nothing, reruns skip media."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from npu_data.cli import main
from tests.local_http import serving

TASKS = [{"id": 1, "data": {"image": "/data/upload/1/ab-one.png"}, "annotations": []},
         {"id": 2, "data": {"image": "/data/upload/1/cd-two.png"}, "annotations": []}]
EXPORT = json.dumps(TASKS).encode()


class Fake(http.server.BaseHTTPRequestHandler):
    cut = False
    hits: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, length: int | None = None, ctype: str = "application/json"
              ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        Fake.hits.append(self.path)
        if self.headers.get("Authorization") != "Token secret-token-1":
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"detail": "bad token"}')
            return
        if self.path.rstrip("/") == "/api/projects/1":
            self._send(json.dumps({"id": 1, "title": "p", "label_config": "<View/>"}).encode())
        elif self.path.startswith("/api/projects/1/export"):
            if Fake.cut:
                self._send(EXPORT[:40], length=len(EXPORT))
                self.close_connection = True
            else:
                self._send(EXPORT)
        elif self.path.startswith("/data/upload/1/"):
            self._send(b"PNGDATA-" + self.path.encode(), ctype="image/png")
        else:
            self.send_response(404)
            self.end_headers()


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "secret-token-1")
    Fake.cut, Fake.hits = False, []
    with serving(Fake) as port:
        yield f"http://127.0.0.1:{port}"


def test_cut_off_export_leaves_nothing(fake: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    Fake.cut = True
    out = tmp_path / "p"
    assert main(["pull", "--url", fake, "--project", "1", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cut off" in err and err.count("\n") == 1 and "secret-token-1" not in err
    assert not (out / "export.json").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".part")]


def test_media_download_and_resume(fake: str, tmp_path: Path) -> None:
    out = tmp_path / "p"
    args = ["pull", "--url", fake, "--project", "1", "--out", str(out), "--download-resources"]
    assert main(args) == 0
    assert json.loads((out / "export.json").read_bytes()) == TASKS
    one = out / "media" / "upload" / "1" / "ab-one.png"
    assert one.read_bytes() == b"PNGDATA-/data/upload/1/ab-one.png"
    (out / "media" / "upload" / "1" / "cd-two.png").unlink()
    Fake.hits = []
    assert main(args) == 0
    media_hits = [h for h in Fake.hits if h.startswith("/data/")]
    assert media_hits == ["/data/upload/1/cd-two.png"]


def test_token_never_on_the_command_line(fake: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LABEL_STUDIO_API_KEY")
    assert main(["pull", "--url", fake, "--project", "1", "--out", str(tmp_path)]) == 1
    assert "--token-file" in capsys.readouterr().err
    assert main(["pull", "--url", fake, "--project", "1", "--out", str(tmp_path),
                 "--token", "x-secret"]) == 1
    err = capsys.readouterr().err
    assert "--token-file" in err and "x-secret" not in err
