"""A fake Label Studio server for the offline pull tests: project 1, its two-task export (cut
off after 40 bytes while ``Fake.cut``) and its media, for the token ``secret-token-1``; every
path asked is recorded in ``Fake.hits``. Served by the ``fake`` fixture of
tests/annotations/conftest.py."""

from __future__ import annotations

import http.server
import json

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
