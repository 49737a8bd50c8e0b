"""``npu-data bench remote --quick`` (issue 16.6) runs and its numbers add up: without locality
each node downloads the whole dataset in its cold epoch, with a shard window half of it (two
nodes), and a warm cache without locality downloads nothing."""

from __future__ import annotations

import re

import pytest

from npu_data import cli

pytestmark = pytest.mark.slow  # two simulated nodes download a dataset through the remote bench


def test_bench_remote_quick(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "remote", "--quick", "--n", "8", "--shard-size", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("remote bench: 8 images 128x96 raw, 2 shards of 4")
    rows = re.findall(r"locality (off|window 2)\s+(cold|warm) cache\s+([\d.]+) img/s per node"
                      r"\s+downloaded\s+([\d.]+) MB per node \(\s*([\d.]+)% of the dataset\)",
                      out)
    got = {(loc, state): (float(rate), float(pct)) for loc, state, rate, _, pct in rows}
    assert len(got) == 4 and all(rate > 0 for rate, _ in got.values())
    assert got[("off", "cold")][1] == 100.0 and got[("off", "warm")][1] == 0.0
    assert 40 < got[("window 2", "cold")][1] < 60  # one of the two shards per node
