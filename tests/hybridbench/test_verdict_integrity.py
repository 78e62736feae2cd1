"""A run that did not run, ran in part, or recorded twice is never a pass; a signal writes what ran (issue 13)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import survival
from hybridbench.checks.registry import run_checks
from hybridbench.config.schema import ChecksCfg
from hybridbench.records.coverage import TrialOutcome, TrialState
from hybridbench.records.schema import Record

ROOT = Path(__file__).resolve().parents[2]


def rec(trial: str, i: int, *, ttft_ms: float = 100.0, arm: str = "lru") -> Record:
    return Record("run", trial, arm, "w", 0, i, i, 0, float(i), float(i), i + ttft_ms / 1e3, i + 0.2, 100, 5, 0,
                  "ok")


def one_trial(state: TrialState, planned: int, recs: list[Record]) -> CheckInput:
    outcome = TrialOutcome("000-w-lru-r0", "w", "lru", 0, state, planned, "SIGINT" if state == "interrupted" else "")
    return CheckInput(ChecksCfg(), ("lru",), "lru", ("w",), {("w", "lru"): recs}, {}, {}, 0,
                      trials={("w", "lru"): [outcome]})


def test_survival_passes_only_when_every_planned_request_is_recorded_once() -> None:
    full = [rec("000-w-lru-r0", i) for i in range(60)]
    (ok,) = survival(one_trial("ran", 60, full))
    assert ok.status == "pass" and "all 60 requests completed" in ok.detail
    (short,) = survival(one_trial("ran", 60, full[:12]))  # the candidate that once passed comparison
    assert short.status == "fail" and "12 of 60 planned requests recorded" in short.detail
    (twice,) = survival(one_trial("ran", 18, [rec("000-w-lru-r0", i % 18) for i in range(36)]))  # a reused run dir
    assert twice.status == "fail" and "18 duplicated" in twice.detail


@pytest.mark.parametrize(("state", "needle"), [("not run", "not run"), ("interrupted", "interrupted (SIGINT)"),
                                               ("engine died", "the engine died")])
def test_a_trial_that_did_not_run_to_its_end_never_passes_survival(state: TrialState, needle: str) -> None:
    (res,) = survival(one_trial(state, 18, []))
    assert res.status == "fail" and needle in res.detail


def test_an_arm_with_no_trial_and_no_record_is_not_all_completed() -> None:
    inp = CheckInput(ChecksCfg(), ("lru",), "lru", ("w",), {("w", "lru"): []}, {}, {}, 0)
    (res,) = survival(inp)
    assert res.status == "fail"


def test_a_nan_never_reaches_a_pass() -> None:
    # A baseline whose TTFTs are all 0 makes the relative change NaN; NaN > limit is False, which read as pass.
    base = [rec("b", i, ttft_ms=0.0) for i in range(10)]
    cand = [rec("c", i, ttft_ms=200.0, arm="seglen") for i in range(10)]
    inp = CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), {("w", "lru"): base, ("w", "seglen"): cand},
                     {}, {}, 0)
    (res,) = run_checks(["ttft"], inp)
    assert res.status != "pass" and ("not a number" in res.detail or "nan" in res.detail)


def hb(*args: str, stderr: object = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hybridbench", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=stderr, text=True)  # type: ignore[call-overload]


def server_pids(seed: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"reference_impl.server.*--random-seed {seed}( |$)"], capture_output=True,
                         text=True, check=False).stdout
    return [int(p) for p in out.split()]


def test_an_arm_that_never_ran_is_reported_not_run_not_pass(tmp_path: Path) -> None:
    """A busy port ends the run at its first trial: the second arm never ran and must not read as surviving."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = hb("+experiment=smoke", "repeats=1", "model=reference-tiny", f"engine.port={busy.getsockname()[1]}",
                  f"hydra.run.dir={tmp_path}")
        _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    states = {t["arm"]: t["state"] for t in bundle["trials"]}
    assert states == {"disabled": "engine died", "branching": "not run"}
    verdicts = {c["arm"]: (c["status"], c["detail"]) for c in bundle["checks"] if c["check"] == "survival"}
    assert verdicts["branching"][0] == "fail" and "not run" in verdicts["branching"][1]
    assert "all requests completed" not in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_run_writes_bundle_report_and_index_and_stops_the_server(sig: signal.Signals,
                                                                             tmp_path: Path) -> None:
    seed = 8200 + int(sig)
    run = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with log.open("w") as fh:
        proc = hb("+experiment=smoke", "model=reference-tiny", f"seed={seed}", "repeats=3", "load.max_concurrency=1",
                  f"hydra.run.dir={run}", stderr=fh)
    deadline = time.monotonic() + 120
    while "[2/6]" not in log.read_text() and time.monotonic() < deadline:  # mid-run: the second trial started
        time.sleep(0.1)
    assert "[2/6]" in log.read_text(), log.read_text()
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=60)
    stopped_s = time.monotonic() - sent
    err = log.read_text()
    assert proc.returncode == 3, err
    assert f"interrupted by {sig.name}" in err.strip().splitlines()[-1]
    assert stopped_s < 20 and not server_pids(seed)
    bundle = json.loads((run / "bundle.json").read_text())
    assert bundle["verdict"] == "interrupted"
    states = [t["state"] for t in bundle["trials"]]
    assert states[0] == "ran" and states[1] == "interrupted" and set(states[2:]) == {"not run"}
    assert "verdict: **interrupted**" in (run / "report.md").read_text()
    (entry,) = [json.loads(line) for line in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert entry["verdict"] == "interrupted" and entry["run_dir"] == str(run)


def test_ctrl_c_after_the_server_was_stopped_does_not_wait_for_it(tmp_path: Path) -> None:
    """A SIGSTOP'd server answers nothing (its health check blocks for engine.health_timeout_s); Ctrl-C once
    waited 28 s for that. Now: written and exited within seconds, the server gone."""
    seed = 8399
    run = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with log.open("w") as fh:
        proc = hb("+experiment=smoke", "model=reference-tiny", f"seed={seed}", "repeats=3", "load.max_concurrency=1",
                  f"hydra.run.dir={run}", stderr=fh)
    deadline = time.monotonic() + 120
    # The second trial's server: "[2/6]" is printed before it starts, and the first one's has exited by then (the
    # reference server exits at once), so wait for the new one to appear.
    while not ("[2/6]" in log.read_text() and server_pids(seed)) and time.monotonic() < deadline:
        time.sleep(0.1)
    (pid,) = server_pids(seed)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(8)  # the hang watchdog's health check (every 5 s) is now blocked on the stopped server
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert time.monotonic() - sent < 15, log.read_text()
    assert proc.returncode == 3 and not server_pids(seed)
    assert json.loads((run / "bundle.json").read_text())["verdict"] == "interrupted"


def test_completed_requests_without_a_ttft_leave_ttft_undecided_not_skipped() -> None:
    # Every candidate request completed but no first token was seen (a stream whose chunks carried no text): the
    # TTFT row said "skip", neutral, and survival's pass passed the run with its TTFT never measured.
    from hybridbench.checks.base import run_verdict

    base = [rec("000-w-lru-r0", i) for i in range(20)]
    cand = [replace(rec("001-w-seglen-r0", i, arm="seglen"), first_token_s=None) for i in range(20)]
    outcomes = {("w", a): [TrialOutcome(t, "w", a, 0, "ran", 20)] for a, t in (("lru", "000-w-lru-r0"),
                                                                                 ("seglen", "001-w-seglen-r0"))}
    inp = CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), {("w", "lru"): base, ("w", "seglen"): cand},
                     {}, {}, 0, trials=outcomes)
    rows = run_checks(["survival", "ttft"], inp)
    (ttft,) = [r for r in rows if r.check == "ttft"]
    assert ttft.status == "inconclusive" and "0 candidate TTFT(s) of 20 and 20 completed" in ttft.detail
    assert run_verdict(r.status for r in rows) == "inconclusive"
    # A side that completed nothing is survival's failure, and its TTFT row stays a skip.
    gone = CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), {("w", "lru"): base, ("w", "seglen"): []},
                      {}, {}, 0)
    assert [r.status for r in run_checks(["ttft"], gone)] == ["skip"]


def test_a_failure_the_server_logged_fails_survival_though_every_request_completed() -> None:
    # The trial snapshot keeps the known failure signatures of the server's log (server_failures); survival never
    # read them: a mamba sanity check that failed mid-trial, every request answered, passed "all 60 completed".
    inp = one_trial("ran", 60, [rec("000-w-lru-r0", i) for i in range(60)])
    logged = replace(inp, snapshots={("w", "lru"): [{"crashes": 0, "server_failures": [
        "idle sanity check failed (#12007)"]}]})
    (res,) = survival(logged)
    assert res.status == "fail" and "the server logged: idle sanity check failed (#12007)" in res.detail
    (clean,) = survival(replace(inp, snapshots={("w", "lru"): [{"crashes": 0, "server_failures": []}]}))
    assert clean.status == "pass"
