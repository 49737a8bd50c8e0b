"""The CLI dispatcher: help, usage errors and one-line user errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npu_data import cli


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "npu_data.cli", *args], capture_output=True,
                          text=True)


def test_no_command_prints_help_and_exits_2() -> None:
    res = run_cli()
    assert res.returncode == 2
    assert "usage: npu-data" in res.stderr


@pytest.mark.parametrize("name", ["import", "inspect", "verify", "show", "parity", "bench", "demo"])
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process: the two subprocess tests around it prove the console entry point, and
    each subprocess pays the torch import (about 4 s)."""
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert name in choices
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0 and "usage: npu-data " + name in capsys.readouterr().out


def test_user_error_is_one_line_without_traceback() -> None:
    res = run_cli("inspect", "/nonexistent/dataset-dir")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "/nonexistent/dataset-dir" in lines[0]
    assert "Traceback" not in res.stderr
