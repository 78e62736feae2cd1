"""The oracle scripts' runs in a SGLang release's interpreter, from a warm fork server instead of a fresh process.

A fresh ``python oracle.py`` spends 5-6 CPU s importing SGLang (``sglang.srt.server_args`` alone: ~5 CPU s) before
it computes anything. Here each pytest process (each xdist worker) starts, on first use, one ``warm_zygote.py`` per
release and environment; it imports ``PRELOAD`` once, then forks a child per request from that untouched state, which
runs the script (or ``-c`` code) as the interpreter would and exits: no request sees another's state. ``run`` gives
what ``subprocess.run(..., capture_output=True, text=True, check=False)`` gave, TimeoutExpired included;
``start``/``Pending.wait`` split it so several releases work at once; ``Interactive`` gives a script's stdin and stdout
as pipes, for one that answers line by line (oracle_client.Driver). The servers stop at the session's end
(conftest.py) or when this process exits.

``HYBRIDBENCH_WARM_SGLANG=0`` runs every request in a fresh process, as before, for debugging; ``=compare`` runs
each both ways and fails on a different exit code or stdout.

What a script does before importing SGLang happens in the server before its fork: every call site passes
``oracle_env()``, without ``SGLANG_USE_CPU_ENGINE`` (the scripts pop it before importing SGLang, which it breaks on
a CPU) and ``PYTHONPATH``; a server is kept per distinct environment, so one that differs is never served from
another's imports. ``warnings.filterwarnings("ignore")`` before the import only hid the import's warnings, which now
go to the server's log. The scripts' patches (``PRETEND_H100``, the resolve codes' platform answers) rebind module
attributes read when called, never bound by an import, so a module imported before them sees them as one imported
after. A child differs from a fresh process in what no oracle reads: its parent, its session, ``sys.orig_argv``, the
string hash seed and numpy's global random state, shared by a server's children (``random`` reseeds at each fork),
on 0.5.16 the ``sys.path`` entries ``pkg_resources`` added from the server's working directory (a stricter path,
never a more lenient one), and the imports' objects, frozen out of the cyclic collector's reach (``gc.freeze``
after a collection: a cycle among them that a request drops stays in memory, its finalizers not run).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import math
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SWITCH = "HYBRIDBENCH_WARM_SGLANG"
CPU_LOG = "HYBRIDBENCH_WARM_CPU_LOG"
ZYGOTE = Path(__file__).resolve().parent / "warm_zygote.py"
# What the oracle scripts import before their work, in each release (one a release lacks is skipped): the fresh
# processes spent 4-5 CPU s on server_args (torch within it), 1.1-1.4 more on memory_pool. Not schedule_batch
# (0.8 s in 0.5.23; two scripts import it).
PRELOAD = ("torch", "sglang.srt.server_args", "sglang.srt.mem_cache.memory_pool")
START_TIMEOUT = 900.0  # the imports, on a loaded 2-core runner
MARGIN = 60.0  # a server that has not answered this long after a request's own timeout is taken as hung
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})  # changes every test; no import reads it


def mode() -> str:
    """"warm" (the default), "fresh" (the switch at 0) or "compare"."""
    value = os.environ.get(SWITCH, "1")
    return {"0": "fresh", "compare": "compare"}.get(value, "warm")


def oracle_env() -> dict[str, str]:
    """The environment the oracle scripts run with: the tests' own, less ``PYTHONPATH`` (nothing of the repo's may
    shadow the release's packages) and ``SGLANG_USE_CPU_ENGINE`` (SGLang's import breaks on a CPU with it)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE")}


class WarmServerError(RuntimeError):
    pass


def _log_cpu(python: Path, what: str, cpu: float | None) -> None:
    """One JSON line into ``$HYBRIDBENCH_WARM_CPU_LOG``, if set: the CPU seconds a server's imports or a request's
    child took, with the test that waited for it (benchmarks/ci_time_by_file.py cannot see them: the server is not
    waited for until the session ends, its children never by the tests)."""
    if path := os.environ.get(CPU_LOG):
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST"), "python": str(python), "what": what,
                                  "cpu": cpu}) + "\n")


def _text(path: Path) -> str:
    """A captured stream as ``subprocess.run(text=True)`` decodes it: the locale's encoding, universal newlines."""
    return path.read_bytes().decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


@dataclass
class Pending:
    """A started request; ``wait`` gives its CompletedProcess (or raises TimeoutExpired, as subprocess.run)."""

    args: list[str]
    timeout: float | None
    files: Path  # this request's folder: in, out, err
    collect: Callable[[], tuple[int, bool]]  # -> (exit code, timed out)
    fresh: Callable[[], subprocess.CompletedProcess[str]] | None = None  # compare mode: the same run, fresh

    def wait(self) -> subprocess.CompletedProcess[str]:
        try:
            rc, timed_out = self.collect()
            out, err = _text(self.files / "out"), _text(self.files / "err")
        finally:
            shutil.rmtree(self.files, ignore_errors=True)
        if timed_out:
            raise subprocess.TimeoutExpired(self.args, self.timeout or 0.0, out, err)
        done = subprocess.CompletedProcess(self.args, rc, out, err)
        if self.fresh is not None and ((again := self.fresh()).returncode, again.stdout) != (rc, out):
            raise WarmServerError(f"{self.args[:2]}: warm exit {rc}, fresh {again.returncode}; stdout warm "
                                  f"{out[-1000:]!r}, fresh {again.stdout[-1000:]!r}; stderr warm {err[-1500:]}")
        return done


class Server:
    """One ``warm_zygote.py`` process: started at once, its imports awaited only when a reply is."""

    def __init__(self, python: Path, env: Mapping[str, str], preload: Sequence[str]) -> None:
        self.python = python
        self.home = Path(tempfile.mkdtemp(prefix="warm-sglang-"))
        self.log = self.home / "server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(python), str(ZYGOTE), *preload], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=dict(env), cwd=self.home)
        self.hello: dict[str, Any] | None = None
        self._buf = b""
        self._done: dict[int, tuple[int, bool]] = {}
        self._next = 0

    def _failed(self, what: str) -> WarmServerError:
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        return WarmServerError(f"the warm server for {self.python} {what} ({SWITCH}=0 runs fresh processes):\n{tail}")

    def submit(self, argv: Sequence[str], files: Path, *, stdin: bool, cwd: str, env: Mapping[str, str],
               timeout: float | None) -> int:
        rid, self._next = self._next, self._next + 1
        request = {"id": rid, "argv": list(argv), "stdin": str(files / "in") if stdin else None,
                   "stdout": str(files / "out"), "stderr": str(files / "err"), "cwd": cwd, "env": dict(env),
                   "timeout": timeout}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._failed(f"exited ({self.proc.wait()})") from None
        return rid

    def _reply(self, deadline: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], None if math.isinf(left) else left)[0]:
                failed = self._failed("did not answer in time")  # its log's tail, before stop() removes it
                self.stop()
                raise failed
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._failed(f"exited ({self.proc.wait()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ready(self) -> dict[str, Any]:
        """The server's hello once its imports are done (WarmServerError if they failed)."""
        if self.hello is None:
            self.hello = self._reply(time.monotonic() + START_TIMEOUT)
            _log_cpu(self.python, "imports", self.hello.get("cpu"))
        if not self.hello.get("ready"):
            raise self._failed(f"cannot serve: {self.hello.get('error')}")
        return self.hello

    def collect(self, rid: int, timeout: float | None) -> tuple[int, bool]:
        self.ready()
        deadline = time.monotonic() + (math.inf if timeout is None else timeout + MARGIN)
        while rid not in self._done:
            reply = self._reply(deadline)
            self._done[reply["id"]] = (reply["rc"], reply["timed_out"])
            _log_cpu(self.python, "request", reply.get("cpu"))
        return self._done.pop(rid)

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()  # EOF: the server ends once its children have
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)


_servers: dict[tuple[str, tuple[str, ...], frozenset[tuple[str, str]]], Server] = {}


def server(python: Path, env: Mapping[str, str], preload: Sequence[str] = PRELOAD) -> Server:
    """This process's server for ``python`` in ``env`` (started now if there is none)."""
    key = (str(python), tuple(preload), frozenset((k, v) for k, v in env.items() if k not in VOLATILE))
    found = _servers.get(key)
    if found is None or found.proc.poll() is not None:
        found = _servers[key] = Server(python, env, preload)
    return found


def start(python: Path, args: Sequence[str], *, input: str | None, env: Mapping[str, str],
          cwd: str | Path | None = None, timeout: float | None, preload: Sequence[str] = PRELOAD) -> Pending:
    """``python *args`` started: in a fork of the warm server, or (switch off) a fresh process."""
    argv = [str(python), *args]
    how = mode()
    files = Path(tempfile.mkdtemp(prefix="warm-sglang-run-"))
    if input is not None:
        (files / "in").write_text(input)
    for name in ("out", "err"):
        (files / name).touch()
    if how == "fresh":
        with open(files / "out", "wb") as out, open(files / "err", "wb") as err, \
                open(files / "in", "rb") if input is not None else open(os.devnull, "rb") as stdin:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, cwd=cwd, env=dict(env))

        def waited() -> tuple[int, bool]:
            try:
                return proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait(), True

        return Pending(argv, timeout, files, waited)
    warm = server(python, env, preload)
    rid = warm.submit(list(args), files, stdin=input is not None, cwd=str(cwd or os.getcwd()), env=env, timeout=timeout)

    def again() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False,
                              env=dict(env), cwd=cwd)

    return Pending(argv, timeout, files, lambda: warm.collect(rid, timeout), again if how == "compare" else None)


def run(python: Path, args: Sequence[str], *, input: str | None, env: Mapping[str, str],
        cwd: str | Path | None = None, timeout: float | None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, *args], input=input, capture_output=True, text=True, check=False, ...)``, from the
    warm server (the switch off: exactly that call)."""
    if mode() == "fresh":
        return subprocess.run([str(python), *args], input=input, capture_output=True, text=True, timeout=timeout,
                              check=False, env=dict(env), cwd=cwd)
    return start(python, args, input=input, env=env, cwd=cwd, timeout=timeout).wait()


class Interactive:
    """``python SCRIPT`` in a fork of the warm server, its stdin and stdout pipes (FIFOs) to this process, as
    ``subprocess.Popen(..., stdin=PIPE, stdout=PIPE, stderr=DEVNULL, text=True)`` gives them, for a script that
    answers a line per line it reads (sglang_driver.py). Ends when its stdin is closed and it exits."""

    def __init__(self, python: Path, script: Path, *, env: Mapping[str, str], cwd: Path, timeout: float,
                 preload: Sequence[str] = PRELOAD) -> None:
        self.files = Path(tempfile.mkdtemp(prefix="warm-sglang-run-"))
        for name in ("in", "out"):
            os.mkfifo(self.files / name)
        (self.files / "err").touch()
        warm = server(python, env, preload)
        warm.ready()  # its imports done (WarmServerError if they failed), before waiting on a child's pipes
        rid = warm.submit([str(script)], self.files, stdin=True, cwd=str(cwd), env=env, timeout=timeout)
        self.collect = lambda: warm.collect(rid, timeout)
        # The child opens its stdin, then its stdout: each open here waits for the child's end of the pipe.
        self.stdin = open(self.files / "in", "w")  # noqa: SIM115 - closed by close()
        self.stdout = open(self.files / "out")  # noqa: SIM115
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, once it exits (the request's own timeout bounds the wait)."""
        if self.returncode is None:
            with contextlib.suppress(BrokenPipeError):
                self.stdin.close()
            try:
                self.returncode = self.collect()[0]  # its stderr (the err file) is dropped, as DEVNULL drops it
            finally:
                self.stdout.close()
                shutil.rmtree(self.files, ignore_errors=True)
        return self.returncode

    def kill(self) -> None:
        """Its stdin closed: the script reads EOF and ends (a script that does not is killed at its timeout)."""
        self.wait()


def stop_all() -> None:
    while _servers:
        _servers.popitem()[1].stop()


atexit.register(stop_all)
