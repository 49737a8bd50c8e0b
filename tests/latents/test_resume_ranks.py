"""A latents store's bytes depend only on the source and the settings: an encode killed with
SIGKILL and resumed, and two torchrun ranks, write exactly the files of one uninterrupted
process (``npu-data encode``), at one CPU thread everywhere (a CPU encode records its
thread count, and a resume with another one is refused: test_encode_resume)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from npu_data import cli
from tests.support.launchers import ROOT, one_node

pytestmark = pytest.mark.slow  # torchrun ranks encoding, one killed and resumed


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _args(pixels: Path, models: dict[str, Path], out: Path) -> list[str]:
    return ["encode", str(pixels), "--vae", str(models["vae"]), "--out", str(out),
            "--text-encoder", str(models["text_encoder"]), "--tokenizer",
            str(models["tokenizer"]), "--text-encoder-2", str(models["text_encoder_2"]),
            "--tokenizer-2", str(models["tokenizer_2"]), "--buckets", "64x64,48x80,80x48",
            "--device", "cpu", "--dtype", "float32", "--batch-size", "1", "--shard-size", "2"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """In-process encodes at the subprocesses' one thread (OMP_NUM_THREADS=1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def single(one_thread: None, pixels: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> Path:
    out = tmp_path_factory.mktemp("single") / "out"
    assert cli.main(_args(pixels, models, out)) == 0
    return out


def test_resume_after_sigkill_gives_identical_bytes(pixels: Path, models: dict[str, Path],
                                                    single: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NPU_DATA_QUIET": "1",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "npu_data.cli", *_args(pixels, models, out)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not (out / "shard-00001").is_dir() and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert not (out / "manifest.json").exists()  # killed midway: shards 2-4 not written
    assert (out / "shard-00000" / "complete.json").is_file()
    assert cli.main(["verify", str(out)]) == 1  # no manifest: not a dataset yet
    assert cli.main([*_args(pixels, models, out), "--resume"]) == 0
    assert _files(out) == _files(single)
    assert cli.main(["verify", str(out)]) == 0


def test_two_ranks_write_the_bytes_of_one(pixels: Path, models: dict[str, Path],
                                          single: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NPU_DATA_QUIET": "1",
           "OMP_NUM_THREADS": "1"}
    out = tmp_path / "split"
    rc, stdout, err = one_node(["-m", "npu_data.cli", *_args(pixels, models, out)], env,
                               timeout=400)
    assert rc == 0, err[-3000:]
    assert _files(out) == _files(single)
