"""Progress of one trial's requests, for the person watching the run.

On a terminal this is a live tqdm bar (done/total, failed, requests/s, elapsed). When the stream is not a
terminal (CI, ``2> log``), carriage-return bar frames would turn the log into one unreadable line, so plain
lines are written instead, at each 10 % of the requests and once more at the end:
``    12/40 requests done, 1 failed``. ``HYBRIDBENCH_PROGRESS`` overrides the choice: ``0``/``off`` writes
nothing, ``lines`` forces plain lines, ``bar`` forces the bar; any other value is refused (exit 2) before the run
starts, since a typo silently falling back to ``auto`` would leave the user wondering why the switch did nothing.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Literal, NoReturn, TextIO

from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

from hybridbench.errors import ConfigError

__all__ = ["ENV_VAR", "Mode", "TrialProgress", "env_mode"]

ENV_VAR = "HYBRIDBENCH_PROGRESS"
Mode = Literal["auto", "bar", "lines", "off"]

_ENV_MODES: dict[str, Mode] = {"0": "off", "off": "off", "false": "off", "no": "off",
                               "lines": "lines", "plain": "lines", "bar": "bar", "1": "auto", "auto": "auto"}


def env_mode() -> Mode:
    """The mode ``HYBRIDBENCH_PROGRESS`` asks for (unset or empty: ``auto``); an unknown value is a ConfigError."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw:
        return "auto"
    if raw not in _ENV_MODES:
        raise ConfigError(f"{ENV_VAR} must be one of {', '.join(_ENV_MODES)}, got {os.environ[ENV_VAR]!r}")
    return _ENV_MODES[raw]


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class TrialProgress:
    """Counts completed requests of one trial and shows them; use as a context manager, ``update`` per request.

    ``mode=None`` reads ``HYBRIDBENCH_PROGRESS`` (default ``auto``: the bar on a TTY, plain lines otherwise).
    """

    def __init__(self, total: int, label: str = "", *, stream: TextIO | None = None, mode: Mode | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.failed = 0
        if mode is None:
            mode = env_mode()
        if mode == "auto":
            mode = "bar" if _is_tty(self.stream) else "lines"
        self.mode: Mode = mode
        self._decile = 0  # last tenth of ``total`` a plain line was written for
        self._printed: tuple[int, int] | None = None  # (done, failed) of the last plain line
        self._closed = False
        self._bar: tqdm[NoReturn] | None = None
        if mode == "bar":
            self._bar = tqdm(total=total, desc=label or None, unit="req", file=self.stream, leave=True,
                             disable=False, dynamic_ncols=True)
            self._bar.set_postfix_str("failed=0", refresh=False)

    def __enter__(self) -> TrialProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def update(self, ok: bool = True) -> None:
        """Record one completed request; ``ok=False`` counts it as failed."""
        self.done += 1
        self.failed += not ok
        if self._bar is not None:
            self._bar.set_postfix_str(f"failed={self.failed}", refresh=False)
            self._bar.update(1)
        elif self.mode == "lines":
            decile = self.done * 10 // self.total if self.total > 0 else 10
            if decile > self._decile or self.done == self.total:
                self._decile = decile
                self._line()

    def close(self) -> None:
        """Show the final state (also when the trial stopped early); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()  # leave=True: the last frame shows the final counts
        elif self.mode == "lines" and self._printed != (self.done, self.failed):
            self._line()

    def _line(self) -> None:
        prefix = f"{self.label}: " if self.label else ""
        self.stream.write(f"    {prefix}{self.done}/{self.total} requests done, {self.failed} failed\n")
        self.stream.flush()
        self._printed = (self.done, self.failed)
