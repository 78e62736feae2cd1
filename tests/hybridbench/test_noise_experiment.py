"""+experiment=noise on the reference engine, on a tiny load: the A/A passes with its intervals inside the limits, and
the planted +25% prefill slowdown of the copy's server fails ttft. One request at a time keeps each arm's modelled
clock free of batching, so both outcomes are exact (zero spread: two repeats decide) and the test cannot flake on a
busy machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model=reference-tiny", "load.max_concurrency=1", "repeats=2", "engine.workload_scale=1",
        "workloads.gsp_prefix_heavy.scale=1",
        "workloads.gsp_prefix_heavy.params={num_groups: 2, prompts_per_group: 3, system_prompt_len: 200, "
        "question_len: 30, output_len: 4}"]


def run(out: Path, *extra: str) -> tuple[int, dict[str, dict[str, object]], str]:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=noise", *TINY, *extra,
                           f"hydra.run.dir={out}"], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    assert (out / "bundle.json").exists(), proc.stderr[-2000:]
    bundle = json.loads((out / "bundle.json").read_text())
    return proc.returncode, {c["check"]: c for c in bundle["checks"]}, (out / "report.md").read_text()


@pytest.mark.parametrize(("slowdown", "code", "status"), [("0.0", 0, "pass"), ("0.25", 1, "fail")])
def test_the_a_a_run_passes_inside_its_limits_and_a_planted_slowdown_fails_ttft(
        tmp_path: Path, slowdown: str, code: int, status: str) -> None:
    rc, checks, report = run(tmp_path / "run", f"noise.planted_slowdown={slowdown}")
    assert rc == code, report[-1500:]
    row = checks["ttft"]
    assert row["status"] == status and row["arm"] == "branching@copy" and "modelled time" in str(row["detail"])
    assert all(isinstance(row[k], float) for k in ("estimate", "low", "high", "limit"))
    if status == "pass":
        assert row["high"] <= row["limit"] and checks["throughput"]["status"] == "pass"  # type: ignore[operator]
        assert "## noise floor" in report and "mean TTFT (modelled)" in report
    else:
        assert row["low"] > row["limit"]  # type: ignore[operator]
        assert float(row["estimate"]) == pytest.approx(0.25, abs=0.03)  # type: ignore[arg-type]
