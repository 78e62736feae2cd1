"""A command's wall seconds and the machine's busy CPU seconds while it ran (``/proc/stat``), as the measurements
of test files on the evidence pages were taken::

    python benchmarks/busy_cpu.py -- .venv/bin/python -m pytest -q tests/sglang_oracle

``/usr/bin/time`` and ``RUSAGE_CHILDREN`` count only processes reaped in the command's own tree: a vLLM engine core
its API server leaves to init, or the children a fork server (tests/sglang_oracle/warm_release.py) reaps, are
missing there. The machine's busy time counts them, and everything else that ran: measure on a quiet machine (the
load average before is printed beside the figures). Linux only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

__all__ = ["busy_seconds", "main"]


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy since boot: user, nice, system, irq and softirq of /proc/stat's first
    line (idle and iowait are not busy)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    assert fields[0] == "cpu", fields
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    load = os.getloadavg()[0]
    busy, start = busy_seconds(), time.monotonic()
    rc = subprocess.run(command, check=False).returncode
    wall, cpu = time.monotonic() - start, busy_seconds() - busy
    print(f"wall {wall:.1f} s, busy CPU {cpu:.1f} s (load average before: {load:.2f}), exit {rc}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
