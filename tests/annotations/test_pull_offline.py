"""pull against a small fake server (the ``fake`` fixture of this folder's conftest.py): cut-off
downloads leave nothing, reruns skip media."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_data.cli import main
from tests.support.labelstudio_fake import TASKS, Fake


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
