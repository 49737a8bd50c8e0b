"""npu-data pull shows and stores its server URL redacted: a ``user:password@`` in --url never
reaches the output, the errors or pull.json (the fake server of the offline pull tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_data.cli import main

PASSWORD = "pw-Hunter2-secret"


def test_url_credentials_never_shown_or_stored(fake: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:  # nothing listens there: the error names the URL
        sock.bind(("127.0.0.1", 0))
        dead = f"http://alice:{PASSWORD}@127.0.0.1:{sock.getsockname()[1]}"
    out = tmp_path / "p"
    rc = main(["pull", "--url", dead, "--project", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 1 and PASSWORD not in captured.out + captured.err
    assert "cannot reach" in captured.err and "REDACTED@127.0.0.1" in captured.err
    assert captured.err.count("\n") == 1
    with_user = fake.replace("http://", f"http://alice:{PASSWORD}@")
    assert main(["pull", "--url", fake, "--project", "1", "--out", str(out)]) == 0
    meta = json.loads((out / "pull.json").read_text())
    assert meta["url"] == fake
    from npu_data.annotations.redact import redact_url

    assert redact_url(with_user) == fake.replace("http://", "http://REDACTED@")
    assert PASSWORD not in "".join(p.read_text(errors="replace") for p in out.rglob("*")
                                   if p.is_file())
