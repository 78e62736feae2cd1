"""Measure a whole command as a user types it: process start to exit.

``measure(argv)`` runs the command in a child process and reaps it with ``os.wait4``, whose resource usage is that
child's alone plus the descendants it reaped: wall seconds, CPU seconds of the process tree (user + system) and
its peak resident memory. CPU seconds are the robust figure on a shared machine; wall seconds mean something only
on a quiet one, so ``machine()`` records the load average beside every figure.

Peak RSS is an upper bound: Linux carries the forking process's peak into the child's ``ru_maxrss`` at exec, so
the figure is at least this script's own resident size (~20 MB). Run it from a small process, as the benchmark
scripts are, never from a large one such as pytest.

The scripts' shared argument types live here too (``count``, ``positive``, ``fraction``, ``folder``, ``file``,
``checkout``): a bad value is argparse's one line naming the flag, exit 2, before anything is measured, never a
traceback halfway through. Standard library only: marconi_replay.py runs under Marconi's interpreter.

``alternate(commands, repeats)`` runs several commands (e.g. this commit's and a baseline worktree's) in turn,
``repeats`` rounds, so a change in the machine's load falls on both sides alike; it reports each side's median.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Measurement", "Summary", "alternate", "checkout", "count", "file", "folder", "fraction", "git_head",
           "machine", "measure", "positive", "verdict"]


@dataclass(frozen=True, slots=True)
class Measurement:
    wall_s: float
    cpu_s: float  # user + system of the child and the descendants it reaped
    peak_rss_mb: float  # the largest resident set of the child or any reaped descendant
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class Summary:
    """The median of each figure over the runs of one command."""

    label: str
    runs: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float


def measure(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = None) -> Measurement:
    """Run ``argv`` to completion and return what it cost; stdout and stderr are captured (to files, so a
    chatty command never blocks on a full pipe)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env), stdout=out, stderr=err)
        deadline = None if timeout is None else start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline else 0)
            if pid:
                break
            if deadline and time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode,
                           out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def alternate(commands: Mapping[str, tuple[Sequence[str], str | None]], repeats: int,
              outputs: dict[str, str] | None = None, ok_exits: frozenset[int] = frozenset({0}),
              env_for: Callable[[str], Mapping[str, str] | None] | None = None) -> dict[str, Summary]:
    """``commands``: label -> (argv, cwd). Runs them round-robin ``repeats`` times; a run exiting outside
    ``ok_exits`` raises. ``outputs``, when given, receives each label's last stdout. ``env_for(label)``, called
    just before each run, gives that run's whole environment (None: this process's), e.g. an emptied cache."""
    runs: dict[str, list[Measurement]] = {label: [] for label in commands}
    for _ in range(repeats):
        for label, (argv, cwd) in commands.items():
            m = measure(argv, cwd=cwd, env=None if env_for is None else env_for(label))
            if m.returncode not in ok_exits:
                raise RuntimeError(f"{label}: {' '.join(argv)} exited {m.returncode}: {m.stderr.strip()[-500:]}")
            runs[label].append(m)
            if outputs is not None:
                outputs[label] = m.stdout
    return {label: Summary(label, len(ms), statistics.median(m.wall_s for m in ms),
                           statistics.median(m.cpu_s for m in ms), statistics.median(m.peak_rss_mb for m in ms))
            for label, ms in runs.items()}


def git_head(path: str | os.PathLike[str] = ".") -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    """CPU model, cores, load average now: printed beside every figure."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} logical cores, load average {load}, Python {platform.python_version()}"


def verdict(value: float, target: float, *, at_least: bool = False) -> str:
    ok = value >= target if at_least else value <= target
    return "meets" if ok else "misses"


def count(least: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``least`` (repeats, runs, sessions, ...)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
        return value
    return parse


def _number(text: str, holds: Callable[[float], bool], wanted: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # refused below, in the same words as any other bad value
    if not holds(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def positive(text: str) -> float:
    """An argparse type: a finite number > 0 (bytes, seconds, a standard deviation)."""
    return _number(text, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a confidence)."""
    return _number(text, lambda v: 0 < v < 1, "in (0, 1)")


def folder(text: str) -> Path:
    """An argparse type: an existing directory."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory")
    return Path(text)


def file(text: str) -> Path:
    """An argparse type: an existing regular file (an interpreter, a trace)."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return Path(text)


def checkout(text: str) -> Path:
    """An argparse type: a tree of a hybridbench commit (a worktree or git archive): the commands run in it."""
    path = folder(text)
    if not (path / "hybridbench").is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a tree of a hybridbench commit (no hybridbench/ in it)")
    return path
