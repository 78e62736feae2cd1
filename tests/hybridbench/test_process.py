"""ServerProcess.stop() leaves nothing behind: children of a dead leader, and children ignoring SIGTERM."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from hybridbench.engines.process import ServerProcess


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_children_of_a_crashed_leader_are_stopped(tmp_path: Path) -> None:
    p = ServerProcess(["bash", "-c", "sleep 1000 & sleep 1000 & wait"], tmp_path / "log", "http://127.0.0.1:1",
                      grace_s=2.0)
    p.start()
    time.sleep(0.3)
    assert p.proc is not None and p.pgid is not None
    os.kill(p.proc.pid, signal.SIGKILL)  # the leader dies, its workers do not
    p.proc.wait()
    assert group_alive(p.pgid)
    p.stop()
    assert not group_alive(p.pgid)


def test_children_that_ignore_sigterm_are_killed_after_the_grace_period(tmp_path: Path) -> None:
    p = ServerProcess(["bash", "-c", "trap '' TERM; sleep 1000 & wait"], tmp_path / "log", "http://127.0.0.1:1",
                      grace_s=1.0)
    p.start()
    time.sleep(0.3)
    assert p.pgid is not None
    start = time.monotonic()
    p.stop()
    assert not group_alive(p.pgid) and time.monotonic() - start < 10


def test_a_server_dies_with_a_harness_killed_by_sigkill(tmp_path: Path) -> None:
    """No ``finally`` runs on SIGKILL: the kernel must take the server down with the harness (PR_SET_PDEATHSIG)."""
    import subprocess
    import sys

    harness = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from hybridbench.engines.process import ServerProcess\n"
        f"p = ServerProcess(['sleep', '1000'], Path({str(tmp_path / 'log')!r}), 'http://127.0.0.1:1')\n"
        "p.start(); print(p.proc.pid, flush=True); time.sleep(1000)\n")], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    server = int(harness.stdout.readline())
    assert group_alive(server)
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 5
    while group_alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(server)  # not reparented to pid 1 and left running
