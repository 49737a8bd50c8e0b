"""Progress off a terminal: plain lines at intervals and a final line, no carriage returns."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from npu_data import progress as P


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lines_every_interval_or_tenth_and_a_final_line() -> None:
    out, clock = io.StringIO(), _Clock()
    bar = P.LineBar(1000, "import", "task", file=out, clock=clock, interval=30)
    for _ in range(50):  # 5%, quickly: nothing yet
        bar.update(1)
    assert out.getvalue() == ""
    bar.update(50)  # a tenth
    clock.t += 31
    bar.update(1)  # an interval
    bar.set_postfix_str("waiting")
    clock.t += 5
    bar.update(798)
    bar.close()
    bar.close()  # once
    lines = out.getvalue().splitlines()
    assert lines == ["import: 100/1000 task (10%), 0 s",
                     "import: 101/1000 task (10%), 31 s",
                     "import: 899/1000 task (90%) [waiting], 36 s",
                     "import: 899/1000 task (90%) [waiting], 36 s, stopped"]
    assert "\r" not in out.getvalue()
    done = io.StringIO()
    with P.LineBar(None, "poll", file=done, clock=clock) as b:
        b.update(3)
    assert done.getvalue() == "poll: 3 it done in 0.0 s\n"


def test_off_a_terminal_bar_and_progress_write_lines(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NPU_DATA_QUIET", "0")
    assert list(P.progress(range(20), desc="verify", unit="shard")) == list(range(20))
    b = P.bar(4, desc="import", unit="task")
    assert isinstance(b, P.LineBar)
    b.update(4)
    b.close()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert lines[0] == "verify: 2/20 shard (10%), 0 s" and len(lines) == 11  # 9 tenths, 2 final
    assert lines[-2].startswith("verify: 20/20 shard (100%) done in ")
    assert lines[-1].startswith("import: 4/4 task (100%) done in ")
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    assert not isinstance(P.bar(4), P.LineBar) and list(P.progress([1, 2])) == [1, 2]
    assert capsys.readouterr().err == ""


def test_a_redirected_cli_writes_no_carriage_returns(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    code = ("from npu_data.progress import progress\n"
            "for _ in progress(range(5), desc='work', unit='step'): pass\n")
    with log.open("w") as fh:
        subprocess.run([sys.executable, "-c", code], stderr=fh, check=True, timeout=120,
                       env={**__import__("os").environ, "NPU_DATA_QUIET": "0"})
    text = log.read_text()
    assert "\r" not in text and text.splitlines()[-1].startswith("work: 5/5 step (100%) done")
