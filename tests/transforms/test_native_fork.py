"""The compiled kernels in a process forked while another thread runs them (a DataLoader
worker forked beside a read-ahead thread): torch's inter-op pool is the parent's there, its
lock possibly held at the fork; 30 of 300 such workers hung before the kernels started their
own threads in a forked process (2026-12-07). The child does what a worker does: torch's own
threads at 1 (its OpenMP team is the parent's, without threads), the kernels' at 2."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from npu_data.common import compiled
from npu_data.transforms import _native
from npu_data.transforms import functional as F

pytestmark = pytest.mark.slow


def _kernel(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return F.resized_crop(x, torch.tensor([[64, 64]] * n), torch.tensor([[0, 0, 64, 64]] * n), 32)


def test_forked_processes_run_the_kernels_while_the_parent_runs_them() -> None:
    assert _native.available()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    x = torch.randint(0, 256, (16, 3, 64, 64), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(0))
    ref = _kernel(x)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            _kernel(x)

    thread = threading.Thread(target=busy)
    thread.start()
    outcomes = []
    try:
        for _ in range(150):
            pid = os.fork()
            if pid == 0:  # the child, as a worker: 2 kernel threads, the same bytes
                code = 1
                try:
                    torch.set_num_threads(1)
                    compiled.set_threads(2)
                    code = 0 if torch.equal(_kernel(x), ref) else 3
                finally:
                    os._exit(code)
            deadline = time.monotonic() + 20
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    outcomes.append(os.waitstatus_to_exitcode(status))
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    outcomes.append("hung")
                    break
                time.sleep(0.005)
    finally:
        stop.set()
        thread.join()
        torch.set_num_threads(before)
    assert outcomes == [0] * 150, {o: outcomes.count(o) for o in set(outcomes)}
