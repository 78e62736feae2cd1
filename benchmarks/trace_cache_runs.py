"""Our trace cache's state for each measured run: ``cold`` (emptied before every run: the first read of a file on a
fresh machine, parse and store) or ``warm`` (filled once by an untimed run: every later command on the same file).

A study replays one trace at many capacities and policies, so most of its commands are warm; the first is cold.
Benchmarks print which state each row was measured in. A baseline tree without the cache ignores the variable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODES", "TraceCacheRuns"]

MODES = ("cold", "warm")
ENV = "HYBRIDBENCH_TRACE_CACHE"  # workloads/trace_cache.py


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

    def prime(self, label: str, argv: Sequence[str], cwd: str | None) -> None:
        """Warm: run the command once, untimed, so the runs measured find the trace stored."""
        if self.mode == "warm":
            shutil.rmtree(self.folder(label), ignore_errors=True)
            subprocess.run(list(argv), cwd=cwd, env=self.env(label), check=True, capture_output=True)

    def clean(self) -> None:
        for path in self.root.glob(f"trace-cache-{self.mode}-*"):
            shutil.rmtree(path, ignore_errors=True)
