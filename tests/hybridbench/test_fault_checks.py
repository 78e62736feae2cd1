"""Each scheduler-side fault of the reference server is caught by the harness check that targets it.

docs/reference/checks.md: a check is only worth having if it fails on the bug it targets. ``no_shared_prefix_hits``
(#28222's "#cached-token: 0" under concurrency) must fail ``cache_hits``; ``no_mamba_pool_check``
(SGLang PR #11214's "Not enough space for mamba cache" crash) must end the run with exit 3 *and* leave a
bundle and report whose ``survival`` verdict names the crash. The state faults are in test_kl_probe.py
and ``copy_every_chunk`` in test_prefill_overhead.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "model=reference-tiny",
                           f"hydra.run.dir={tmp_path}", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads((tmp_path / "bundle.json").read_text())


def verdicts(bundle: dict[str, Any], check: str) -> dict[str, dict[str, Any]]:
    return {c["arm"]: c for c in bundle["checks"] if c["check"] == check}


@pytest.mark.parametrize("fault", [None, "no_shared_prefix_hits"])
def test_cache_hits_catches_shared_prefixes_never_hitting_under_concurrency(tmp_path: Path, fault: str | None) -> None:
    extra = [f"engine.extra_args=[--inject-bug,{fault}]"] if fault else []
    # One repeat, judged on hits alone: the fault changes hits, and a timing row needs repeats this test does not.
    proc, bundle = run(tmp_path, "repeats=1", "checks.enabled=[survival,cache_hits]", "checks.min_token_hit_rate=0.3",
                       *extra)
    hits = verdicts(bundle, "cache_hits")["branching"]
    if fault is None:
        assert proc.returncode == 0 and hits["status"] == "pass" and hits["observed"] > 0.4
    else:
        assert proc.returncode == 1 and hits["status"] == "fail" and hits["observed"] < 0.3


def test_survival_reports_the_mamba_allocation_crash_and_the_run_exits_3(tmp_path: Path) -> None:
    proc, bundle = run(tmp_path, "repeats=1", "load.max_concurrency=18", "engine.max_mamba_cache_size=20",
                       "engine.extra_args=[--inject-bug,no_mamba_pool_check]")
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines()[-1].startswith("error: reference server for arm branching died")
    survival = verdicts(bundle, "survival")
    assert survival["disabled"]["status"] == "pass"  # the trial before the crash still counts
    assert survival["branching"]["status"] == "fail"
    assert "Not enough space for mamba cache" in survival["branching"]["detail"]
    assert bundle["verdict"] == "error" and "died" in bundle["infrastructure_error"]
    report = (tmp_path / "report.md").read_text()
    assert "verdict: **error**" in report
    row = next(line for line in report.splitlines() if line.startswith("| survival | gsp | branching"))
    assert row.count(" | ") == 5  # the log tail's own '|' separators are escaped
