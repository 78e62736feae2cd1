"""What a command does when the reader of its standard output goes away (``... | head``): it stops, quietly.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises ``BrokenPipeError``: every command printed a
traceback there (or, through ``workloads.cli.run_cli``, "error: Broken pipe" and the usage-error code). A C tool is
killed by the signal instead; these commands exit with the code that gives (128 + SIGPIPE), saying nothing. Only
stdout's reader counts: a broken pipe or socket anywhere else (a server that died mid-request) is still an error.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable

__all__ = ["EXIT_STDOUT_CLOSED", "quiet_on_closed_stdout", "stdout_closed", "stop_writing_stdout"]

EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE (13): what the shell reports for `yes | head`'s yes


def stdout_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to stdout after its reader went away (not some other pipe or socket breaking)."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        # Linux reports POLLERR on a pipe's write end once no reader is left (fs/pipe.c, pipe_poll).
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # stdout replaced by something without a descriptor
        return False


def stop_writing_stdout() -> int:
    """Point stdout at /dev/null and give :data:`EXIT_STDOUT_CLOSED`: the interpreter flushes stdout on its way out,
    and that flush must not fail (and print) again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_STDOUT_CLOSED


def quiet_on_closed_stdout(run: Callable[[], int]) -> int:
    """``run()``'s exit code; :data:`EXIT_STDOUT_CLOSED`, and no traceback, when stdout's reader went away."""
    try:
        code = run()
        # A piped stdout is block-buffered: what is left is written here, inside the try, not by the interpreter's
        # final flush, which would fail with "Exception ignored ... BrokenPipeError" and exit 120.
        sys.stdout.flush()
        return code
    except BrokenPipeError as exc:
        if not stdout_closed(exc):
            raise
        return stop_writing_stdout()
