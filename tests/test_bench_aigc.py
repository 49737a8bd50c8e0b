"""npu_data/bench/aigc_buckets.py runs at tiny sizes, and its two pipelines agree on the pixels
(the bench exits non-zero when its first batches differ); no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_data.bench import aigc_buckets


def test_the_aigc_bench_runs_and_both_pipelines_agree(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert aigc_buckets.main(["--quick", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "first batch max diff 0.00 levels" in out and "img/s" in out
