"""The reference server bounds what one stream may cost and checks its own flags (issue 13).

A client that stopped reading one stream once grew the server from 583 MB to 1.36 GB in a minute (an update per
token, each holding the whole output so far, queued for a reader that never came) and kept 1.08 GB after it left.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_harness import running_server

ROOT = Path(__file__).resolve().parents[3]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_is_dropped_and_counted_with_memory_bounded() -> None:
    with running_server("--arm", "lru", "--max-total-tokens", "40000", "--context-length", "40000",
                        "--stream-stall-timeout", "3", "--log-level", "warning") as server:
        before = rss_mb(server.proc.pid)
        body = json.dumps({"input_ids": [5, 6, 7, 8], "stream": True,
                           "sampling_params": {"max_new_tokens": 30000, "ignore_eos": True}}).encode()
        lazy = socket.create_connection(("127.0.0.1", server.port))
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # and never read a byte
        peak, deadline = before, time.monotonic() + 120
        while time.monotonic() < deadline and server.metric("sglang:num_dropped_streams_total") < 1:
            peak = max(peak, rss_mb(server.proc.pid))
            time.sleep(0.5)
        assert server.metric("sglang:num_dropped_streams_total") == 1
        assert peak - before < 150, (before, peak)  # was +800 MB a minute
        assert server.metric("sglang:num_running_reqs") == 0  # its slots were freed
        assert server.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})["meta_info"]
        lazy.close()


@pytest.mark.parametrize(("flags", "needle"), [
    (["--port", "99999"], "--port must be at most 65535, got 99999"),
    (["--hicache-ratio", "nan"], "--hicache-ratio must be a finite number >= 0, got nan"),
    (["--seglen-eff-weight", "nan"], "--seglen-eff-weight must be a finite number >= 0, got nan"),
    (["--seglen-eff-weight", "inf"], "--seglen-eff-weight must be a finite number >= 0, got inf"),
    (["--stream-stall-timeout", "0"], "--stream-stall-timeout must be positive"),
    # a 34-line torch overflow traceback, exit 1
    (["--enable-hierarchical-cache", "--hicache-ratio", "1e300"],
     "--hicache-ratio must be in (0, 100] (host pools as a multiple of the device pools), got 1e+300"),
    (["--seglen-eff-weight", "1.5"], "--seglen-eff-weight must be in [0, 1], got 1.5"),
    # a failed bind after start-up, exit 1
    (["--host", "256.1.1.1"], "--host '256.1.1.1' is not an address or a host name this machine resolves "
                              "(Name or service not known)"),
    (["--context-length", "0"], "--context-length must be at least 2, got 0"),  # read as "not given"
])
def test_bad_flags_are_one_line_and_exit_2(flags: list[str], needle: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "reference_impl.server", *flags], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {needle}", proc.stderr


def test_a_usage_error_answers_before_torch_is_loaded() -> None:
    """A bad flag is refused before ``import torch``, which was 1.5 CPU s of every refusal (and of this file's)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "reference_impl.server", "--port", "99999"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("error: --port must be at most 65535, got 99999")
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")]
    assert "reference_impl.server.args" in imported and "torch" not in imported
