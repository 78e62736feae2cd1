"""benchmarks/busy_cpu.py counts the CPU of processes the command's own accounting misses: a grandchild left to
init, as a vLLM engine core is when its API server goes first."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A spinner, 0.6 CPU s, which marks when it is done; the child starts it in a session of its own and exits at once,
# leaving it to init (so no process of the command's tree reaps it); the command then waits for the mark.
SPIN = """
import sys, time
t = time.process_time()
while time.process_time() - t < 0.6:
    pass
open(sys.argv[1], "w").close()
"""
ORPHAN = """
import subprocess, sys
subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], start_new_session=True)
"""
WAIT = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
"""


def test_busy_cpu_counts_a_grandchild_left_to_init(tmp_path: Path) -> None:
    done = tmp_path / "done"
    (tmp_path / "orphan.py").write_text(ORPHAN)
    (tmp_path / "spin.py").write_text(SPIN)
    (tmp_path / "wait.py").write_text(WAIT)
    script = (f"{sys.executable} {tmp_path / 'orphan.py'} {tmp_path / 'spin.py'} {done} && "
              f"{sys.executable} {tmp_path / 'wait.py'} {done}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "busy_cpu.py"), "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"wall ([\d.]+) s, busy CPU ([\d.]+) s", proc.stderr)
    assert m, proc.stderr
    # the orphan's 0.6 CPU s are counted (on a busy machine other work counts too: this bound alone proves little)
    assert float(m.group(2)) >= 0.5, proc.stderr
    # ...which the command's own accounting, as /usr/bin/time reads it, does not see: the bound that carries weight
    reaped = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert reaped < 0.45, reaped


def test_a_command_is_required() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "busy_cpu.py")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "give the command to measure after --" in proc.stderr
