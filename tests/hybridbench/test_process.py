"""ServerProcess.stop() leaves nothing behind: children of a dead leader, and children ignoring SIGTERM."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from hybridbench.engines.process import ServerProcess, exception_line


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


# The shape of vLLM 0.32.0's CPU Mamba2 crash log (docs/engines/vllm.md): the worker's root cause,
# then the engine core's and the API server's wrappers, then shutdown talk.
CRASH_LOG = """\
(APIServer pid=1) WARNING 11-24 21:40:05 [system_utils.py:255] fd limit errors like `OSError: [Errno 24] Too many`
INFO:     Application startup complete.
(Worker pid=3) ERROR 11-24 21:38:03 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=3) ERROR 11-24 21:38:03 [multiproc_executor.py:1063]     varlen_states[last_chunk_indices_p]
(Worker pid=3) ERROR [multiproc_executor.py:1063] IndexError: index 3 is out of bounds for dimension 0 with size 1
(EngineCore pid=2) ERROR 11-24 21:38:03 [core.py:1512] RuntimeError: Worker failed with error 'index 3 is out of bounds'
(APIServer pid=1) ERROR [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
nanobind: leaked 4 functions!
See https://nanobind.readthedocs.io/en/latest/refleaks.html
"""


def test_exception_line_is_the_root_cause_not_a_wrapper() -> None:
    lines = CRASH_LOG.splitlines()
    assert exception_line(lines[1:]) == "IndexError: index 3 is out of bounds for dimension 0 with size 1"
    assert exception_line(lines[-2:]) == ""
    assert exception_line(["vllm.v1.engine.exceptions.EngineDeadError: dead"]) == (
        "vllm.v1.engine.exceptions.EngineDeadError: dead")


def test_log_tail_of_a_dead_server_leads_with_what_killed_it(tmp_path: Path) -> None:
    """Only what the server logged after it became ready counts: a startup warning naming an error is not it."""
    log = tmp_path / "server.log"
    lines = CRASH_LOG.splitlines(keepends=True)
    log.write_text("".join(lines[:2]))
    p = ServerProcess(["true"], log, "http://127.0.0.1:1")
    p.ready_offset = log.stat().st_size
    assert p.log_tail() == "".join(lines[:2]).strip().replace("\n", " | ")  # no exception since ready
    log.write_text("".join(lines))
    tail = p.log_tail(lines=2)
    assert tail.startswith("IndexError: index 3 is out of bounds for dimension 0 with size 1 | log tail: nanobind")
