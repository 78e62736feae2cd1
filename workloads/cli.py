"""CLI plumbing shared by ``workloads.generate``, ``workloads.stats`` and ``workloads.scale``.

User errors (bad option, unreadable or malformed input, too small a vocab) end the process with one
line on stderr and exit code 2 (docs/reference/exit-codes.md), never a traceback. Output files are written atomically
by ``write_trace``, so a failed run leaves no half-written trace behind.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from workloads.closed_stdout import quiet_on_closed_stdout
from workloads.errors import WorkloadError
from workloads.trace import TraceError

__all__ = ["EXIT_USAGE", "OneLineArgumentParser", "run_cli"]

EXIT_USAGE = 2


class _UsageError(Exception):
    pass


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command was, so every ``finally`` runs: the atomic writer's temporary
    file beside the output is removed (Python's default SIGTERM ends the process at once and left it there, a
    hidden ``.OUT.jsonl.XXXXXXXX`` of up to the whole trace's size)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(signum)

    previous: dict[signal.Signals, Any] = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: error: {message}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_cli(main: Callable[[Sequence[str] | None], int], prog: str, argv: Sequence[str] | None = None) -> int:
    """Run ``main``; map user errors to one stderr line ``PROG: error: ...`` and exit code 2."""
    try:
        with _stop_on_signals():
            return quiet_on_closed_stdout(lambda: main(argv))
    except _Stopped as exc:
        print(f"{prog}: error: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except _UsageError as exc:
        print(_one_line(str(exc)), file=sys.stderr)
    except (WorkloadError, TraceError) as exc:
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
    except OSError as exc:  # e.g. the output directory is not writable
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{_one_line(exc.strerror or str(exc))}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return EXIT_USAGE
