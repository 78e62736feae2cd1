"""/health_generate judges progress, as SGLang does: a busy server with a long queue is healthy."""

from __future__ import annotations

import contextlib
import threading
import time

from server_harness import Server, running_server


def test_health_generate_answers_while_its_probe_waits_behind_a_long_queue() -> None:
    """SGLang returns 200 once any scheduler output arrives after the probe was sent. The reference server
    used to wait for its own probe, which under an all-at-once load queued behind every request: the
    survival experiment's busy server was declared hung (two 30 s health timeouts) while it made progress."""
    with running_server("--arm", "lru", "--max-running-requests", "1") as server:
        body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 12000, "ignore_eos": True}}
        # Each long request alone outlasts the server's 20 s probe timeout at this machine's decode speed.
        # _quietly: the server stops under them when the test ends (they printed three tracebacks as warnings)
        workers = [threading.Thread(target=_quietly, args=(server, body), daemon=True) for _ in range(3)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 10
        while server.metric("sglang:num_queue_reqs") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.metric("sglang:num_queue_reqs") >= 2  # the probe lands behind these
        t0 = time.monotonic()
        status, _ = server.request("GET", "/health_generate")
        assert status == 200 and time.monotonic() - t0 < 5


def test_the_server_listens_with_sglangs_backlog() -> None:
    # SGLang's uvicorn listens with a backlog of 2048; aiohttp's default 128 dropped SYNs when a load client opened
    # hundreds of connections at once, and every dropped one came back a second later as a TTFT outlier.
    import subprocess

    from reference_impl.server.__main__ import LISTEN_BACKLOG

    with running_server() as server:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True,
                             check=True).stdout.split()
    # a listening socket's Send-Q column is its backlog (capped by net.core.somaxconn)
    with open("/proc/sys/net/core/somaxconn") as fh:
        cap = int(fh.read())
    assert LISTEN_BACKLOG == 2048 and int(out[2]) == min(LISTEN_BACKLOG, cap), out


PROBE_LINE = "Prefill batch, #new-seq: 1, #new-token: 1, "  # /health_generate's probe: one token, input_ids [0]


def _quietly(server: Server, body: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the server is stopped under it at the end of the test
        server.request("POST", "/generate", body)


def test_a_busy_server_is_healthy_without_a_probe_joining_its_batches() -> None:
    """A probe request joining a busy server's batches changes their composition, and so the modelled clock the
    reference engine's timing checks judge: while the server is forwarding, /health_generate answers from that
    progress and submits nothing. An idle server is still probed (the contrast shows the probe is visible)."""
    with running_server("--arm", "lru") as server:  # room to run: a probe sent now would join the batch at once
        assert server.request("GET", "/health_generate")[0] == 200  # idle: a probe runs
        body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}
        threading.Thread(target=_quietly, args=(server, body), daemon=True).start()
        deadline = time.monotonic() + 10
        while server.metric("sglang:num_running_reqs") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.metric("sglang:num_running_reqs") >= 1
        for _ in range(3):
            assert server.request("GET", "/health_generate")[0] == 200
        proc = server.proc
    log = proc.stdout.read() if proc.stdout is not None else ""
    assert log.count(PROBE_LINE) == 1, [line for line in log.splitlines() if "#new-token: 1, " in line]


def test_ready_is_logged_only_once_the_port_is_bound() -> None:
    # SGLang logs "fired up and ready to roll" after uvicorn binds. The reference server logged it from aiohttp's
    # on_startup, before the bind: on a port in use it said ready and then failed, and a log watcher took it as up.
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "reference_impl.server", "--host", "127.0.0.1", "--port",
                               str(port)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in proc.stderr, proc.stderr[-1000:]
    assert "ready to roll" not in proc.stdout + proc.stderr
    with running_server() as server:  # and a server that binds says it, once
        server.request("GET", "/health")
    assert (server.proc.stdout.read() if server.proc.stdout else "").count("ready to roll") == 1


def test_a_stopped_server_exits_0_with_every_line_it_wrote() -> None:
    """The server skips the interpreter's teardown on the way out (os._exit, reference_impl.server.__main__): SIGTERM
    still ends it with exit 0 and nothing it wrote lost, its last request's batch lines included."""
    with running_server("--arm", "lru") as server:
        server.generate({"input_ids": list(range(5, 40)), "sampling_params": {"max_new_tokens": 3}})
    assert server.proc.returncode == 0
    out = server.proc.stdout.read() if server.proc.stdout else ""
    assert out.endswith("\n") and "Prefill batch, #new-seq: 1, #new-token: 35" in out, out[-1000:]
