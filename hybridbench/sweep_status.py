"""Exit codes of sweep jobs that ran in other processes (hydra_plugins.hybridbench_cluster's submitit launchers
report them here), so ``python -m hybridbench -m hydra/launcher=submitit_*`` exits with its worst job's code like
a local sweep. Hydra itself discards a task's return value."""

from __future__ import annotations

_codes: list[int] = []


def record(code: int) -> None:
    _codes.append(code)


def worst() -> int:
    """The worst reported exit code (0 when no job reported)."""
    return max(_codes, default=0)


def reset() -> None:
    """A new run in the same process (``hybridbench.__main__.main`` called again) starts with no reports."""
    _codes.clear()
