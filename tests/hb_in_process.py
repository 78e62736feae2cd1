"""``python -m hybridbench ARGS`` as its entry in the test's process, for tests whose proof is an exit code and the
lines written, not the process: imports and start-up are paid once per test process instead of once per case. The
tests that are about the process (exit codes of a real run, signals, directories made from a cwd, the stdout/stderr
split of a real child) keep running ``python -m hybridbench`` itself."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HbHere = Callable[..., subprocess.CompletedProcess[str]]


def _show_on_stderr(  # noqa: PLR0917 - warnings.showwarning's own signature
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: object = None,
        line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@pytest.fixture(name="hb_here")
def hb_here_fixture(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[HbHere]:
    """Calls ``hybridbench.__main__.main(args)`` from ``cwd`` (the repository root by default); returns (exit code,
    stdout, stderr) as a CompletedProcess. main installs its stop-signal handlers: the ones before are put back."""
    from hybridbench.__main__ import _STOP_SIGNALS, main

    handlers = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

    def call(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        # A run that reached its task had Hydra configure the root logger (a console handler on this test's
        # captured stdout, a file in the run dir): the next tests of this process log as before it.
        root = logging.getLogger()
        level, root_handlers = root.level, list(root.handlers)
        try:
            # pytest records warnings instead of printing them: here they reach the captured stderr, as a real
            # process prints them, so a one-line assertion still sees a stray warning line.
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = _show_on_stderr
                code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            for handler in root.handlers:
                if handler not in root_handlers:
                    handler.close()
            root.handlers[:] = root_handlers
            root.setLevel(level)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    yield call
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
