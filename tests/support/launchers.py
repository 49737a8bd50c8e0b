"""Start torchrun launchers for the distributed tests and collect what they print.

Two "nodes" start in order: node 0 first, node 1 once node 0's launcher listens on the
master port. Started together, node 1's store client retries its connection to a port
nobody listens on yet, and one of those tries may take the master port itself as its own
local port (Linux then connects the socket to itself). A launcher still running at the deadline
is killed with its workers (each launcher leads its own session), and the failure shows what
both printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).parents[2]
LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp


def free_port() -> int:
    """A port nobody listens on now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (read from /proc, so no connection is made)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def torchrun(args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``python -m torch.distributed.run ARGS`` in the repository root, output piped, in a
    session of its own (``kill_all``)."""
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], env=env,
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def kill_all(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and its workers (an orphaned worker would hold the output pipes open)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finish(procs: Sequence[subprocess.Popen[str]], deadline: float,
           timeout: float) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each launcher by ``deadline`` (``time.monotonic``);
    past it, every launcher is killed and the test fails showing what each printed."""
    out = []
    for p in procs:
        try:
            got, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                kill_all(q)
            tails = [q.communicate() for q in procs]
            raise AssertionError(f"a launcher ran past {timeout:.0f} s; their output:\n" + "\n".join(
                f"--- node {i} stdout:\n{o[-2000:]}\n--- node {i} stderr:\n{e[-4000:]}"
                for i, (o, e) in enumerate(tails))) from None
        out.append((p.returncode, got, err))
    return out


def one_node(script: Sequence[str], env: dict[str, str], nproc: int = 2,
             timeout: float = 180) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one launcher running ``nproc`` ranks of ``script``."""
    proc = torchrun(["--nnodes", "1", "--nproc_per_node", str(nproc), "--master_addr",
                     "127.0.0.1", "--master_port", str(free_port()), *script], env)
    return finish([proc], time.monotonic() + timeout, timeout)[0]


def two_nodes(script: Sequence[str], envs: Sequence[dict[str, str]],
              timeout: float = 120) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of two launchers, ``--nnodes 2`` with one rank each,
    running ``script`` (node ``i`` with ``envs[i]``); a test failure naming both outputs if
    one is still running after ``timeout`` seconds."""
    port = free_port()
    procs: list[subprocess.Popen[str]] = []
    deadline = time.monotonic() + timeout
    for node, env in enumerate(envs):
        procs.append(torchrun(["--nnodes", "2", "--node_rank", str(node), "--nproc_per_node",
                               "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               *script], env))
        while node == 0 and not listening(port) and procs[0].poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    return finish(procs, deadline, timeout)
