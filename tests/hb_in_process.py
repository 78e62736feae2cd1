"""An entry point's ``main(argv)`` run in the test's process, for tests whose proof is an exit code and the lines
written, not the process: imports and start-up are paid once per test process instead of once per case. The tests
that are about the process (exit codes of a real run, signals, directories made from a cwd, the stdout/stderr split
of a real child) keep running the real command."""

from __future__ import annotations

import contextlib
import io
import logging
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HbHere = Callable[..., subprocess.CompletedProcess[str]]


def _show_on_stderr(  # noqa: PLR0917 - warnings.showwarning's own signature
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: object = None,
        line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def call_main(main: Callable[[list[str]], int], args: Sequence[str], *,
              cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``main(args)`` from ``cwd``: its exit code (a ``SystemExit``'s, as the interpreter turns it into one) and what
    it wrote to stdout and stderr. pytest records warnings instead of printing them: here they reach stderr, as a
    real process prints them, so a one-line assertion still sees a stray warning line."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show_on_stderr
        try:
            code = main(list(args))
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture(name="hb_here")
def hb_here_fixture() -> Iterator[HbHere]:
    """Calls ``hybridbench.__main__.main(args)`` (:func:`call_main`). main installs its stop-signal handlers: the
    ones before are put back."""
    from hybridbench.__main__ import _STOP_SIGNALS, main

    handlers = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

    def call(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        # A run that reached its task had Hydra configure the root logger (a console handler on this call's
        # stdout, a file in the run dir): the next tests of this process log as before it.
        root = logging.getLogger()
        level, root_handlers = root.level, list(root.handlers)
        try:
            return call_main(main, args, cwd=cwd)
        finally:
            for handler in root.handlers:
                if handler not in root_handlers:
                    handler.close()
            root.handlers[:] = root_handlers
            root.setLevel(level)

    yield call
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
