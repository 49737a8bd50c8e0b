"""npu_data/bench/aigc_buckets.py runs at tiny sizes, and its two pipelines agree on the pixels
(the bench exits non-zero when its first batches differ); DALI's feed gives its pipeline the
same batches and windows; no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from npu_data.bench import aigc_buckets, aigc_dali


def test_the_aigc_bench_runs_and_both_pipelines_agree(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert aigc_buckets.main(["--quick", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "first batch max diff 0.00 levels" in out and "img/s" in out
    roof = out.split("ceilings over ")[1].splitlines()[0]  # the row's ceilings and its share
    assert "read" in roof and "decode" in roof and "kernels" in roof and "ours at" in roof


def test_dali_crop_anchors_land_on_the_drawn_window() -> None:
    """DALI places a crop at ``pos * (full - window)`` in float32, rounded or truncated by
    version: the anchor ``crop_pos`` gives lands on the integer offset either way."""
    rng = np.random.default_rng(0)
    full = rng.integers(1, 4096, 200_000)
    window = rng.integers(1, full + 1)
    offset = rng.integers(0, full - window + 1)
    pos = np.array([aigc_dali.crop_pos(int(o), int(f), int(w))
                    for o, f, w in zip(offset, full, window, strict=True)], np.float32)
    assert ((pos >= 0) & (pos <= 1)).all()
    at = pos * (full - window).astype(np.float32)
    assert np.array_equal(np.round(at).astype(np.int64), offset)
    assert np.array_equal(np.trunc(at).astype(np.int64), offset)


def test_the_dali_feed_gives_each_batch_then_starts_the_next_epoch(tmp_path: Path) -> None:
    files = [tmp_path / f"{i}.jpg" for i in range(3)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * (i + 1))
    params = [{"nh": 10 + i, "nw": 20, "top": i, "left": 0, "th": 8, "tw": 20, "flip": i % 2}
              for i in range(3)]
    feed = aigc_dali.Feed([[2, 0], [1]], files, params)
    for _ in range(2):  # two epochs from the same object, as DALI's source is called
        jpegs, nh, nw, th, tw, pos_y, pos_x, flip = next(feed)
        assert [j.tobytes() for j in jpegs] == [b"\x02" * 3, b"\x00"]
        assert [float(v) for v in nh] == [12.0, 10.0] and [int(v) for v in flip] == [0, 0]
        assert float(pos_y[0]) == aigc_dali.crop_pos(2, 12, 8) and float(pos_x[0]) == 0.0
        assert [j.tobytes() for j in next(feed)[0]] == [b"\x01" * 2]
        with pytest.raises(StopIteration):
            next(feed)
