"""The one error type a workload raises for bad input (bad option value, malformed data, too small a vocab).

The CLIs turn it into one line on stderr and exit code 2; library callers catch it like a ``ValueError``.
"""

from __future__ import annotations

__all__ = ["WorkloadError", "require"]


class WorkloadError(ValueError):
    """Bad input to a workload; the message is one line naming the option, file or value at fault."""


def require(condition: bool, message: str) -> None:
    """Raise ``WorkloadError(message)`` unless ``condition`` holds (keeps parameter checks one line each)."""
    if not condition:
        raise WorkloadError(message)
