"""The fork server ``warm_release.py`` starts in a SGLang release's venv: it imports what the oracle scripts share
once, then runs each request in a fresh fork of that state, as ``python SCRIPT ARGS`` or ``python -c CODE ARGS``
would run it (argv, ``sys.path[0]``, ``__main__``, cwd, environment, stdin/stdout/stderr files), and reports the
child's exit code. Never imported by the tests: it runs under the release's interpreter.

Protocol: fd 0 carries one JSON request per line ({"id", "argv", "stdin", "stdout", "stderr", "cwd", "env",
"timeout"}); fd 1 carries {"ready", "cpu", ...} once the imports are done, then {"id", "rc", "timed_out", "cpu"}
per request as its child ends (``cpu``: CPU seconds, the imports' and each child's, which no ``RUSAGE_CHILDREN`` of
the tests sees). EOF on fd 0 ends the server. While it runs, what the imports print goes to fd 2 (a log file).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import resource
import select
import signal
import sys
import time
import types
from typing import Any

Request = dict[str, Any]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _preload(names: list[str]) -> list[str]:
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # this release has no such module (the others do)
            if exc.name is None or not name.startswith(exc.name):
                raise
            continue
        loaded.append(name)
    return loaded


def _write(fd: int, msg: dict[str, Any]) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the child leads its own group: whatever it started goes too
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def serve(requests: int, replies: int) -> Request | None:
    """Forks a child per request; returns the request in the child, None in the server once fd 0 ends."""
    libc = ctypes.CDLL(None)
    running: dict[int, tuple[int, int, float | None]] = {}  # pidfd -> (request id, pid, deadline)
    pending = b""
    open_ = True
    while open_ or running:
        deadlines = [d for _, _, d in running.values() if d is not None]
        wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        ready, _, _ = select.select(([requests] if open_ else []) + list(running), [], [], wait)
        now = time.monotonic()
        for pidfd, (rid, pid, deadline) in list(running.items()):
            timed_out = pidfd not in ready and deadline is not None and now >= deadline
            if pidfd in ready or timed_out:
                if timed_out:
                    _kill(pid)
                _, status, usage = os.wait4(pid, 0)
                os.close(pidfd)
                del running[pidfd]
                _write(replies, {"id": rid, "rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
                                 "cpu": usage.ru_utime + usage.ru_stime})
        if requests not in ready:
            continue
        chunk = os.read(requests, 1 << 16)
        open_ = bool(chunk)
        if not open_:  # the client is gone or done: no one will collect a child still running, so none may outlive it
            for _rid, pid, _deadline in running.values():
                _kill(pid)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            req: Request = json.loads(line)
            sys.stdout.flush()  # nothing buffered in the server may reach a child's output
            sys.stderr.flush()
            libc.fflush(None)
            pid = os.fork()
            if pid == 0:
                for fd in (requests, replies, *running):
                    os.close(fd)
                return req
            timeout = req["timeout"]
            running[os.pidfd_open(pid)] = (req["id"], pid, None if timeout is None else time.monotonic() + timeout)
    return None


def become(req: Request) -> tuple[str, types.CodeType]:
    """In the child: the process ``python *argv`` would have been, up to running its code."""
    os.setsid()
    for fd, path, mode in ((0, req["stdin"] or os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                           (2, req["stderr"], os.O_WRONLY)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv: list[str] = req["argv"]
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        return "", compile(argv[1], "<string>", "exec", dont_inherit=True)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
    with open(argv[0], "rb") as f:
        return argv[0], compile(f.read(), argv[0], "exec", dont_inherit=True)


def run(path: str, code: types.CodeType) -> None:
    """``code`` as the interpreter runs a script or ``-c``: in a new ``__main__``; an exception or SystemExit leaves
    through the interpreter's own exit (its traceback, exit code, atexit handlers and stream flushes)."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if path:
        main.__file__ = path
        main.__dict__["__cached__"] = None
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def main() -> Request | None:
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # nothing the imports do reads the requests
    os.close(null)
    os.dup2(2, 1)  # nor writes into the replies: what they print goes to the log
    hello: dict[str, Any] = {"ready": True, "loaded": _preload(sys.argv[1:])}
    # The imports' objects out of the collector's reach: a child's collections, and the one its exit runs, would
    # walk the whole imported heap, copying every page they touch (copy on write): ~2 CPU s a request in 0.5.23,
    # ~0.4 frozen. The garbage the imports left is collected first, as a fresh process would.
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    # A thread running at fork would be missing from every child, any lock it held held forever. numpy's OpenBLAS
    # pool (started at import) stops itself at fork (pthread_atfork) and restarts in whichever process calls it.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if (threads := _threads()) != 1:
        hello = {"ready": False, "error": f"{threads} threads run in the server after the imports: a fork loses them"}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    hello["cpu"] = usage.ru_utime + usage.ru_stime  # the imports' CPU seconds
    _write(replies, hello)
    return serve(requests, replies) if hello["ready"] else None


if __name__ == "__main__":
    request = main()
    if request is not None:
        run(*become(request))
