"""``npu-data import / verify / inspect / show`` through the CLI's entry point, in this process
(its exit code and what it prints, as the console script gives them), and in subprocesses
where a process is killed or two run at once."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest

from tests.support.exports import make_export

pytestmark = pytest.mark.slow  # each test runs npu-data import (several times, some in subprocesses)

ENV = {**os.environ, "NPU_DATA_QUIET": "1"}


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``npu-data ARGS`` run by its entry point in this process (a subprocess pays the torch
    import, about 4 s a call): the exit code and what it printed."""
    from npu_data import cli as entry

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {"NPU_DATA_QUIET": "1"}), redirect_stdout(out), \
            redirect_stderr(err):
        try:
            code = entry.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(map(str, args)), code, out.getvalue(),
                                       err.getvalue())


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _one_error(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_import_summary_inspect_show(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=4)
    res = cli("import", export, "--out", tmp_path / "ds", "--shard-size", "2")
    assert res.returncode == 0, res.stderr
    assert "imported 4 of 4 tasks" in res.stdout and "rejected 0" in res.stdout
    res = cli("inspect", tmp_path / "ds")
    assert res.returncode == 0
    assert "samples                4" in res.stdout and "shards                 2" in res.stdout
    assert "boxes                  4" in res.stdout and "samples with captions  4" in res.stdout
    res = cli("show", tmp_path / "ds", "--index", "1", "--out", tmp_path / "prev.png")
    assert res.returncode == 0 and (tmp_path / "prev.png").stat().st_size > 0
    _one_error(cli("show", tmp_path / "ds", "--index", "9", "--out", tmp_path / "x.png"),
               "out of range")


def test_killed_import_resumes_byte_identical(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=40)
    full = cli("import", export, "--out", tmp_path / "full", "--shard-size", "1")
    assert full.returncode == 0, full.stderr
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "npu_data.cli", "import", str(export),
                             "--out", str(out), "--shard-size", "1", "--workers", "1"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.is_dir() and len(list(out.glob("shard-*"))) >= 3:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "import finished before it was killed"
    _one_error(cli("verify", out), "manifest.json", "--resume")
    res = cli("import", export, "--out", out, "--shard-size", "1", "--resume")
    assert res.returncode == 0, res.stderr
    assert "kept from an earlier run" in res.stdout
    assert _files(out) == _files(tmp_path / "full")


def test_verify_names_the_flipped_sample(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=4)
    assert cli("import", export, "--out", tmp_path / "ds", "--shard-size", "2").returncode == 0
    ok = cli("verify", tmp_path / "ds")
    assert ok.returncode == 0 and "ok" in ok.stdout
    index = __import__("numpy").load(tmp_path / "ds" / "shard-00001" / "index.npy")
    data = tmp_path / "ds" / "shard-00001" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[int(index["offset"][1]) + 5] ^= 0xFF
    data.write_bytes(bytes(raw))
    res = cli("verify", tmp_path / "ds")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "shard-00001 sample 1 (dataset index 3, task 103)" in res.stderr
    assert "crc32" in res.stderr


def test_bad_images_are_rejected_with_reasons(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=5, corrupt=1, missing=3)
    res = cli("import", export, "--out", tmp_path / "ds", "--shard-size", "2")
    assert res.returncode == 1, res.stderr  # more rejected than --max-rejected's 0
    assert "imported 3 of 5 tasks" in res.stdout and "rejected 2 of 5 tasks" in res.stderr
    assert str(tmp_path / "ds" / "rejected.jsonl") in res.stderr
    assert "cannot decode the image" in res.stderr and "image file not found" in res.stderr
    res = cli("import", export, "--out", tmp_path / "ds2", "--shard-size", "2",
              "--max-rejected", "40%")
    assert res.returncode == 0 and "rejected 2 of 5 tasks" in res.stdout, res.stderr
    rows = [json.loads(x) for x in (tmp_path / "ds" / "rejected.jsonl").read_text().splitlines()]
    assert [(r["index"], r["task_id"]) for r in rows] == [(1, 101), (3, 103)]
    assert "img1.png" in rows[0]["reason"] and "img3.png" in rows[1]["reason"]
    assert cli("verify", tmp_path / "ds").returncode == 0


def test_strict_stops_naming_the_task_and_resume_finishes(tmp_path: Path) -> None:
    export = make_export(tmp_path / "p", n=6, corrupt=4)
    out = tmp_path / "ds"
    res = cli("import", export, "--out", out, "--shard-size", "2", "--strict")
    _one_error(res, "task 104", "#4")
    assert (out / "shard-00000" / "complete.json").is_file()
    assert not (out / "manifest.json").exists()
    res = cli("import", export, "--out", out, "--shard-size", "2", "--resume", "--max-rejected",
              "1")
    assert res.returncode == 0 and "rejected 1 of 6 tasks" in res.stdout


def test_user_errors(tmp_path: Path) -> None:
    _one_error(cli("import", tmp_path / "none.json", "--out", tmp_path / "o"), "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": 1, "data": {"image": "a.png"}')
    _one_error(cli("import", bad, "--out", tmp_path / "o2"), "bad.json")
    export = make_export(tmp_path / "p", n=2)
    assert cli("import", export, "--out", tmp_path / "o3").returncode == 0
    _one_error(cli("import", export, "--out", tmp_path / "o3"), "not empty", "--resume")
    _one_error(cli("import", export, "--out", tmp_path / "o4", "--reencode", "jpeg:90"),
               "--store encoded")
    _one_error(cli("import", export, "--out", tmp_path / "o5", "--store", "encoded",
                   "--reencode", "png:3"), "jpeg:Q")
    _one_error(cli("verify", tmp_path / "missing"), "npu-data import")


def test_encoded_jpegs_get_restart_markers_unless_kept(tmp_path: Path) -> None:
    """--store encoded re-encodes JPEGs losslessly with restart markers (same pixels);
    --keep-jpeg-bytes stores the files byte for byte; a resume cannot mix the two."""
    import io

    import numpy as np
    from PIL import Image

    from npu_data.codecs import jpeg_ops
    from npu_data.shards.reader import ShardDataset
    from npu_data.tools.sample_data import make_bench_images

    project = make_bench_images(tmp_path / "p", n=3, width=97, height=61)
    export, root = project.export_path, project.export_path.parent
    files = sorted(project.images_dir.glob("*.jpg"))
    common = ("--store", "encoded", "--images-root", root, "--shard-size", "2")
    assert cli("import", export, "--out", tmp_path / "marked", *common).returncode == 0
    res = cli("import", export, "--out", tmp_path / "kept", *common, "--keep-jpeg-bytes")
    assert res.returncode == 0, res.stderr
    marked, kept = ShardDataset(tmp_path / "marked"), ShardDataset(tmp_path / "kept")
    for i, f in enumerate(files):
        original = f.read_bytes()
        pixels = np.asarray(Image.open(io.BytesIO(original)).convert("RGB"))
        for ds, same in ((marked, jpeg_ops() is None), (kept, True)):
            k, j = ds.locate(i)
            row = ds.shard(k).index[j]
            off, n = int(row["offset"]), int(row["length"])
            stored = ds.shard(k).data[off:off + n].tobytes()
            assert (stored == original) == same and (b"\xff\xdd" in stored) != same, f
            np.testing.assert_array_equal(ds[i]["image"], pixels)
    assert cli("verify", tmp_path / "marked").returncode == 0
    _one_error(cli("import", export, "--out", tmp_path / "kept", *common, "--resume"),
               "other options", "add --keep-jpeg-bytes")
    _one_error(cli("import", export, "--out", tmp_path / "marked", *common, "--resume",
                   "--keep-jpeg-bytes"), "other options", "drop --keep-jpeg-bytes")
    other = cli("import", export, "--out", tmp_path / "marked", *common, "--resume",
                "--shard-size", "3")
    _one_error(other, "other options")
    assert "--keep-jpeg-bytes" not in other.stderr  # no hint for other changes
    _one_error(cli("import", export, "--out", tmp_path / "o", "--keep-jpeg-bytes"),
               "--store encoded")


def test_refused_resume_deletes_nothing(tmp_path: Path) -> None:
    """--resume with other options is refused before anything is removed: a complete
    dataset keeps its manifest, a killed import keeps its shards (issue 30, class 2)."""
    export = make_export(tmp_path / "p", n=4)
    out = tmp_path / "ds"
    assert cli("import", export, "--out", out, "--shard-size", "2").returncode == 0
    before = _files(out)
    _one_error(cli("import", export, "--out", out, "--shard-size", "3", "--resume"),
               "other options", "nothing was changed")
    assert _files(out) == before
    assert cli("verify", out).returncode == 0
    (out / "manifest.json").unlink()  # as a killed import leaves it
    before = _files(out)
    _one_error(cli("import", export, "--out", out, "--shard-size", "2", "--resume",
                   "--max-side", "8"), "other options")
    assert _files(out) == before


def test_second_import_of_a_folder_fails_with_one_line(tmp_path: Path) -> None:
    import fcntl

    export = make_export(tmp_path / "p", n=4)
    out = tmp_path / "ds"
    assert cli("import", export, "--out", out, "--shard-size", "2").returncode == 0
    assert not (out / ".npu-data-import.lock").exists()  # removed when the import ends
    with open(out / ".npu-data-import.lock", "w") as held:  # another import is running
        fcntl.flock(held, fcntl.LOCK_EX)
        before = _files(out)
        _one_error(cli("import", export, "--out", out, "--shard-size", "2", "--resume"),
                   "another import", ".npu-data-import.lock")
        assert _files(out) == before
    res = cli("import", export, "--out", out, "--shard-size", "2", "--resume")
    assert res.returncode == 0, res.stderr


def test_two_resumes_at_once_never_race(tmp_path: Path) -> None:
    """Two `--resume` imports started together on a killed import's folder: each finishes
    or fails with the one-line lock message; the dataset verifies."""
    export = make_export(tmp_path / "p", n=12)
    out = tmp_path / "ds"
    assert cli("import", export, "--out", out, "--shard-size", "1").returncode == 0
    (out / "manifest.json").unlink()
    for k in range(2, 12, 2):  # half the shards to write again
        for p in (out / f"shard-{k:05d}").iterdir():
            p.unlink()
        (out / f"shard-{k:05d}").rmdir()
    args = [sys.executable, "-m", "npu_data.cli", "import", str(export), "--out", str(out),
            "--shard-size", "1", "--resume"]
    procs = [subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [(p.wait(120), p.stderr.read() if p.stderr else "") for p in procs]
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        if code:
            assert code == 1 and "Traceback" not in err, err
            assert err.strip().count("\n") == 0 and "another import" in err, err
    assert cli("verify", out).returncode == 0


def _in_process(capsys, *args: str | Path) -> tuple[int, str]:
    from npu_data import cli as entry

    code = entry.main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_bad_options_name_the_flags(tmp_path: Path, capsys) -> None:
    """The import options' one-line errors (``shards.importer``, shared with
    LabelStudioDataset, which names keywords) name this command's flags, values as typed."""
    export = make_export(tmp_path / "p", n=2)
    out = tmp_path / "o"
    cases = [(("--shard-size", "0"), "--shard-size 0: must be at least 1"),
             (("--workers", "0"), "--workers 0: must be at least 1"),
             (("--reencode", "png:3", "--store", "encoded"), "--reencode png:3: expected jpeg:Q"),
             (("--reencode", "jpeg:90"), "--reencode needs --store encoded"),
             (("--keep-jpeg-bytes",), "--keep-jpeg-bytes needs --store encoded"),
             (("--max-side", "8", "--store", "encoded"),
              "--max-side with --store encoded needs --reencode jpeg:Q"),
             (("--max-download-mb", "0"), "--max-download-mb 0: must be positive"),
             (("--download-timeout", "-1"), "--download-timeout -1: must be a positive"),
             (("--download-workers", "0"), "--download-workers 0: must be at least 1"),
             (("--max-tar-member-mb", "0"), "--max-tar-member-mb 0: must be positive"),
             (("--allow-download",), "--allow-download needs the hosts"),
             (("--storage-endpoint", "ftp://x"), "--storage-endpoint ftp://x: expected http")]
    for flags, words in cases:
        code, err = _in_process(capsys, "import", export, "--out", out, *flags)
        assert code == 1 and err == f"error: {err[7:]}" and err.count("\n") == 1, (flags, err)
        assert words in err and "=" not in err.split(": ", 1)[0], (flags, err)
    assert not out.exists()  # refused before anything was written
    # a rejection reason names the flag in the CLI's report, the keyword in Python's
    tasks = json.loads(export.read_text())
    tasks[1]["data"]["image"] = "/data/upload/1/x.png"
    export.write_text(json.dumps(tasks))
    code, err = _in_process(capsys, "import", export, "--out", out, "--max-rejected", "1")
    reasons = [json.loads(x)["reason"] for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert code == 0 and len(reasons) == 1 and "pass --ls-data-dir (" in reasons[0], reasons
    from npu_data.shards.importer import import_dataset

    import_dataset(export, tmp_path / "py")
    reasons = [json.loads(x)["reason"] for x in (tmp_path / "py" / "rejected.jsonl")
               .read_text().splitlines()]
    assert "pass ls_data_dir= (" in reasons[0], reasons
    code, err = _in_process(capsys, "import", export, "--out", tmp_path / "s", "--strict")
    assert code == 1 and "pass --ls-data-dir (" in err and "drop --strict to skip" in err, err
