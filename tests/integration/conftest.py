"""A real Label Studio server (module scope: stopped as soon as its tests end), started from .ci/labelstudio-server.sh's venv."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "labelstudio-server.sh"
TOKEN = "npudatatesttoken0123456789"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "labelstudio: needs a real Label Studio server "
                            "(venv from `bash .ci/labelstudio-server.sh ensure-venv`)")


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def labelstudio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    venv = Path(os.environ.get("LABEL_STUDIO_VENV", ROOT / ".venv-labelstudio"))
    if not (venv / "bin" / "label-studio").exists():
        pytest.fail(f"no Label Studio venv at {venv} — create it with "
                    "`bash .ci/labelstudio-server.sh ensure-venv` (or set LABEL_STUDIO_VENV)")
    data = tmp_path_factory.mktemp("labelstudio")
    port = _free_port()
    env = dict(os.environ, LABEL_STUDIO_VENV=str(venv), LABEL_STUDIO_USERNAME="test@example.com",
               LABEL_STUDIO_PASSWORD="npu-data-test", LABEL_STUDIO_USER_TOKEN=TOKEN)
    log = open(data / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(["bash", str(SCRIPT), "run", str(port), str(data)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Label Studio exited ({proc.returncode}): "
                            + (data / "server.log").read_text(errors="replace")[-2000:])
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("Label Studio did not answer /health within 150 s: "
                            + (data / "server.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        yield Server(url, TOKEN, data)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(data / "media", ignore_errors=True)
