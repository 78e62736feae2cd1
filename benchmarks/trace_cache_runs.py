"""Our trace cache's state for each measured run: ``cold`` (emptied before every run: the first read of a file on a
fresh machine, parse and store) or ``warm`` (filled once by an untimed run: every later command on the same file).

A study replays one trace at many capacities and policies, so most of its commands are warm; the first is cold.
Benchmarks print which state each row was measured in. A baseline tree without the cache ignores the variable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODES", "TraceCacheRuns"]

MODES = ("cold", "warm")
ENV = "HYBRIDBENCH_TRACE_CACHE"  # workloads/trace_cache.py
RACY_S = 2.5  # past workloads.trace_cache.RACY_NS


@dataclass(frozen=True, slots=True)
class TraceCacheRuns:
    mode: str
    root: Path  # a scratch folder of the benchmark's own (never the user's cache)

    def folder(self, label: str) -> Path:
        return self.root / f"trace-cache-{self.mode}-{label}"

    def env(self, label: str) -> dict[str, str]:
        """The whole environment of one run of ``label``'s command, its cache in the state asked for."""
        if self.mode == "cold":
            shutil.rmtree(self.folder(label), ignore_errors=True)
        return {**os.environ, ENV: str(self.folder(label))}

    def prime(self, label: str, argv: Sequence[str], cwd: str | None, ok_exits: frozenset[int] = frozenset({0}),
              *, expect_entry: bool = True) -> None:
        """Warm: run the command once, untimed, so the runs measured find the trace stored.

        A trace written within the cache's racy window is not stored on its first read: the run is repeated once
        the window has passed, and a prime that still stores nothing raises (the rows would not be warm)."""
        if self.mode != "warm":
            return
        shutil.rmtree(self.folder(label), ignore_errors=True)
        for attempt in range(2):
            proc = subprocess.run(list(argv), cwd=cwd, env=self.env(label), capture_output=True, text=True,
                                  check=False)
            if proc.returncode not in ok_exits:
                raise RuntimeError(f"{label}: priming {' '.join(argv)} exited {proc.returncode}: "
                                   f"{proc.stderr.strip()[-500:]}")
            if not expect_entry or any(self.folder(label).glob("*.trace")):
                return
            if attempt == 0:
                time.sleep(RACY_S)
        raise RuntimeError(f"{label}: {' '.join(argv)} left no trace-cache entry in {self.folder(label)}: "
                           "not a warm cache (a trace under 16 MB, or the cache off?)")

    def clean(self) -> None:
        for path in self.root.glob(f"trace-cache-{self.mode}-*"):
            shutil.rmtree(path, ignore_errors=True)
