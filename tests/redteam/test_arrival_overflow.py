"""An arrival schedule no consumer can follow: ``load.slowdown=1e300`` (or a Poisson rate of 1e-300/s, or a trace
whose timestamps reach 1e300 s) overflowed the simulator's integer-nanosecond clock. ``hybridbench plan`` printed a
traceback (exit 1), a run created its directory and ended "internal OverflowError" with exit 3, and
``python -m reference_impl.simulate --request-rate 1e-300`` printed a traceback. Now: one line naming the key or
flag, exit 2, no run directory left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.preview.__main__ import main as plan_main
from workloads.arrival import MAX_ARRIVAL_S, LoadSpec, arrival_schedule
from workloads.trace import TraceRow

ROOT = Path(__file__).resolve().parents[2]


def _rows(ts: list[float]) -> list[TraceRow]:
    return [TraceRow(i, 0, t, (1, 2, 3), (4,), {}) for i, t in enumerate(ts)]


def test_a_schedule_past_the_bound_names_the_load_key() -> None:
    with pytest.raises(ValueError, match=r"^slowdown: .*at most 1e\+09 s"):
        arrival_schedule(_rows([0.0, 10.0]), LoadSpec("trace", slowdown=1e300))
    with pytest.raises(ValueError, match=r"^slowdown: "):
        arrival_schedule(_rows([0.0, 1e300]), LoadSpec("trace"))
    with pytest.raises(ValueError, match=r"^request_rate: "):
        arrival_schedule(_rows([0.0] * 3), LoadSpec("poisson", request_rate=1e-300))
    # up to the bound, nothing changes
    ok = arrival_schedule(_rows([0.0, MAX_ARRIVAL_S]), LoadSpec("trace"))
    assert ok.times_s == (0.0, MAX_ARRIVAL_S)


def test_plan_refuses_a_rate_no_run_could_follow(capsys: pytest.CaptureFixture[str]) -> None:
    code = plan_main(["--no-forecast", "+experiment=smoke", "engine=sim", "load=poisson", "load.request_rate=1e-300"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "load.request_rate" in err and "workloads.gsp" in err, err


def test_a_run_refuses_it_before_any_trial_and_leaves_no_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "load=poisson",
                           "load.request_rate=1e-300", f"hydra.run.dir={run}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "load.request_rate" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not run.exists() or not any(run.iterdir())


def test_simulate_names_the_flag(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"session_id": i, "turn_id": 0, "ts": 0.0, "num_input_tokens": 3,
                                         "num_output_tokens": 1, "input_tokens": [1, 2, 3], "output_tokens": [4]})
                             + "\n" for i in range(3)))
    proc = subprocess.run([sys.executable, "-m", "reference_impl.simulate", str(trace), "--model", "qwen3.5-9b",
                           "--request-rate", "1e-300"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --request-rate: ") and "Traceback" not in proc.stderr, proc.stderr
