"""The harness against the reference CPU server: a real process over real HTTP, including its death.

A killed server (SIGKILL) and a hung one (SIGSTOP) must end the run with exit code 3, one clear
line, the records of the requests that finished kept, and no server process left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridbench.results import read_run, read_usage

ROOT = Path(__file__).resolve().parents[2]
BASE = ["+experiment=smoke", "engine=reference", "model=reference-tiny"]


def server_pids(seed: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"reference_impl.server.*--random-seed {seed}( |$)"],
                         capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def start(tmp_path: Path, seed: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hybridbench", *BASE, f"seed={seed}", f"hydra.run.dir={tmp_path}", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_smoke_on_the_reference_server_reports_real_cache_hits(tmp_path: Path) -> None:
    proc = start(tmp_path, 5151)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" and r["cache_state"] == "cold-flushed" for r in records)
    assert not any(r["modelled"] for r in records)
    hits = [r["cached_tokens"] for r in records if r["arm"] == "branching"]
    assert any(h > 0 for h in hits) and all(r["cached_tokens"] == 0 for r in records if r["arm"] == "disabled")
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    assert bundle["provenance"]["engine"]["version"] == "0.1.0"
    cmd = bundle["provenance"]["engine"]["command"]
    assert "reference_impl.server" in cmd and "--arm" in cmd
    branching = [t for t in bundle["trials"] if t["arm"] == "branching"]
    assert len(branching) == 2  # smoke: two repeats on the reference engine (conf/sizing/smoke/cpu.yaml)
    for trial in branching:
        server = trial["server"]
        assert server["log_prefill_batches"] > 0  # parsed from its "Prefill batch" lines
        # Three accountings of one trial's hits agree: per-request meta_info, the log lines, /metrics counters.
        trial_hits = sum(r["cached_tokens"] for r in records if r["trial_id"] == trial["trial_id"])
        assert trial_hits == server["log_cached_tokens"] == server["metrics_cached_tokens"] > 0
    # Each trial's saved log lines (the range its bundle line names) are the ones its log totals came from.
    usage = {s.trial_id: s for s in read_usage(read_run(tmp_path)).series}
    for t in bundle["trials"]:
        prefill = [p for p in usage[t["trial_id"]].points if p.kind == "prefill"]
        assert len(prefill) == t["server"]["log_prefill_batches"] > 0
        assert max(p.token_usage or 0.0 for p in prefill) <= t["server"]["peak_token_usage"]
    assert not server_pids(5151)


@pytest.mark.parametrize(("sig", "needle"), [(signal.SIGKILL, "died"), (signal.SIGSTOP, "hung")])
def test_a_server_that_dies_or_hangs_ends_the_run_with_exit_3(tmp_path: Path, sig: int, needle: str) -> None:
    seed = 6161 if sig == signal.SIGKILL else 7171
    # Long enough that the kill lands mid-run, short enough that a request finishes well inside its timeout on
    # a loaded 2-core runner (a CI run saw 400 tokens at ~12 ms each against a 4 s timeout: every request timed out).
    proc = start(tmp_path, seed, "workloads.gsp.params.output_len=120", "load.max_concurrency=2",
                 "engine.request_timeout_s=6", "engine.health_timeout_s=5")
    records = tmp_path / "records.jsonl"
    deadline = time.monotonic() + 120
    # Act once a request has *completed*: on a loaded machine the first record can be a timeout.
    while time.monotonic() < deadline and not (records.exists() and '"status": "ok"' in records.read_text()):
        time.sleep(0.1)
    pids = server_pids(seed)
    assert pids, "the server never started"
    for pid in pids:
        os.kill(pid, sig)
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 3, err
    assert needle in err and "Traceback" not in err
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert any(r["status"] == "ok" for r in kept)  # what finished before the fault is still there
    time.sleep(0.5)
    assert not server_pids(seed)  # no orphan: the whole process group was stopped


def test_a_busy_port_is_refused_before_launch(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start(tmp_path, 8181, f"engine.port={port}")
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3 and f"engine.port {port}" in err and "already in use" in err
    assert not server_pids(8181)


def test_sigterm_to_hybridbench_stops_its_server_and_exits_3(tmp_path: Path) -> None:
    proc = start(tmp_path, 9191, "workloads.gsp.params.output_len=400", "load.max_concurrency=2")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not server_pids(9191):
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "interrupted" in err
    time.sleep(0.5)
    assert not server_pids(9191)
