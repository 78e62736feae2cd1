"""A server engine's process: launch in its own process group, log to the run dir, readiness by
polling a health endpoint, death detection, and shutdown with SIGTERM then SIGKILL of the group."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from hybridbench.config.redact import scrub, secret_values
from hybridbench.config.redact_files import scrub_file
from hybridbench.engines.server_auth import NO_AUTH, ServerAuth
from hybridbench.errors import EngineError

__all__ = ["ServerProcess", "bindable", "exception_line", "free_port", "port_in_use"]

# A Python exception as a traceback's last line prints it, wherever a logger's prefix puts it.
_EXCEPTION = re.compile(r"(?:^|[\s\]|])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (\S.*)$")


def exception_line(lines: Sequence[str]) -> str:
    """The first exception line in ``lines`` ("IndexError: index 3 is out of bounds ..."), or "". A chained
    crash prints its root cause first (a worker's error, then the engine's and the API server's wrappers)."""
    for line in lines:
        if m := _EXCEPTION.search(line.rstrip()):
            return f"{m.group(1)}: {m.group(2)}"
    return ""


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def bindable(host: str) -> str:
    """Why a server could not listen on ``host`` (a name that does not resolve, an address of another machine), or
    "" when it can: checked at plan time, where a bad engine.host is a config error, not a crash at launch."""
    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except (OSError, UnicodeError) as exc:
            return str(getattr(exc, "strerror", None) or exc)
    return ""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook that asks Linux to SIGKILL the server when the harness dies, even by SIGKILL (no
    ``finally`` runs then): a killed harness once left its server answering /health under pid 1. SGLang's and
    vLLM's own workers already follow their launcher the same way. The signal follows the *thread* that
    forked, so servers are started from the main thread."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the harness died between fork and prctl
            os._exit(1)

    return hook


class ServerProcess:
    def __init__(self, command: Sequence[str], log_path: Path, base_url: str, *,
                 env: dict[str, str] | None = None, health_paths: Sequence[str] = ("/health_generate", "/health"),
                 grace_s: float = 10.0, auth: ServerAuth = NO_AUTH) -> None:
        self.command = list(command)
        self.auth = auth  # the key the server was given, sent where its own rule wants it
        self.log_path = log_path
        self.base_url = base_url
        self.env = env
        self.health_paths = tuple(health_paths)
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.ready_offset = 0  # log size when the server became ready: later exceptions are the serving's

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})}, start_new_session=True,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 - prctl and getppid only: no locks, no imports
            )
        except OSError as exc:
            raise EngineError(f"cannot start {self.command[0]}: {exc.strerror or exc}") from None
        finally:
            log.close()
        self.pgid = self.proc.pid  # start_new_session: the server leads its own process group

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout_s: float) -> bool:
        """True if the process exits within ``timeout_s``."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def secrets(self) -> frozenset[str]:
        """What the launch hides (``--api-key X``, ``HF_TOKEN=...`` in its env): the server may echo it."""
        return secret_values(self.command) | secret_values(self.env or {}) | self.auth.secrets

    def log_tail(self, lines: int = 5) -> str:
        """The server's last words (they end up in error messages, bundle.json and report.md), secrets hidden,
        led by the root exception it logged since it became ready (a dying server's last lines are often its
        wrappers' shutdown talk, not the cause)."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace").strip().splitlines()
        tail = " | ".join(text[-lines:])
        cause = exception_line(data[self.ready_offset:].decode("utf-8", "replace").splitlines())
        return scrub(f"{cause} | log tail: {tail}" if cause and cause not in tail else tail, self.secrets)

    def scrub_log(self) -> None:
        """Rewrite the log with secrets hidden (``unrecognized arguments: --api-key ...`` quotes them)."""
        scrub_file(self.log_path, self.secrets)

    def healthy(self, timeout_s: float = 5.0) -> bool:
        """The first health path the server has decides; a later one is tried only if an earlier one is
        missing (404). A timeout or 503 is unhealthy: a stuck scheduler can still answer /health (#30314)."""
        for path in self.health_paths:
            try:
                with urllib.request.urlopen(self.auth.request(self.base_url, path), timeout=timeout_s) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    continue
                return False
            except (urllib.error.URLError, OSError, TimeoutError):
                return False
        return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pause = 0.02  # doubling to 0.25 s: a CPU server is up in about a second, a GPU one in minutes
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise EngineError(f"server exited with code {code} before it was ready: {self.log_tail()}")
            if self.healthy(timeout_s=2.0):
                with contextlib.suppress(OSError):
                    self.ready_offset = self.log_path.stat().st_size
                return
            time.sleep(pause)
            pause = min(2 * pause, 0.25)
        raise EngineError(f"server not ready after {timeout_s:g} s (log: {self.log_path})")

    def _signal_group(self, sig: int) -> bool:
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        """Stop the whole group, then hide secrets in what it logged."""
        try:
            self._stop_group()
        finally:
            self.scrub_log()

    def _stop_group(self) -> None:
        """SGLang's scheduler and vLLM's workers are children that may outlive a dead leader. SIGCONT first so
        a stopped (hung) group can act on SIGTERM; SIGKILL after the grace period."""
        proc = self.proc
        if proc is None or not self._signal_group(signal.SIGCONT):
            return
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not self._group_alive():
                return
            time.sleep(0.02)
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        deadline = time.monotonic() + 5.0  # killed children linger as zombies until init reaps them
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _group_alive(self) -> bool:
        return self._signal_group(0)
