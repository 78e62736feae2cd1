"""An explicit cache-on baseline beside only cache-off arms (``checks.baseline_arm=branching`` in
``+experiment=smoke``, arms [disabled, branching]): a cache-off arm is compared only with a cache-off baseline, so
ttft and throughput had no candidate, each said "found nothing in this run to judge" (a skip), and the run passed,
exit 0, on survival and the hit rate: the symptom commit 4b9ddcb removed for the default baseline, still there when
the key is set. Nothing was compared, so the timing rows are inconclusive (exit 1), never a silent pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import throughput, ttft
from hybridbench.config.schema import ChecksCfg
from hybridbench.records.schema import Record

ROOT = Path(__file__).resolve().parents[2]


def _records(arm: str) -> list[Record]:
    return [Record("run", f"{rep}-{arm}", arm, "w", rep, i, i, 0, i * 0.5, i * 0.5, i * 0.5 + 0.1, i * 0.5 + 0.4,
                   100, 4, 0, "ok") for rep in range(3) for i in range(5)]


@pytest.mark.parametrize("check", [ttft, throughput])
def test_a_cache_on_baseline_beside_only_cache_off_arms_is_inconclusive_not_skipped(check: object) -> None:
    from hybridbench.metrics.summary import summarize

    records = {("w", a): _records(a) for a in ("disabled", "branching")}
    sums = {k: [summarize([r for r in v if r.repeat == rep]) for rep in range(3)] for k, v in records.items()}
    inp = CheckInput(ChecksCfg(), ("disabled", "branching"), "branching", ("w",), records, sums, {}, 0,
                     cache_off=frozenset({"disabled"}))
    rows = check(inp)  # type: ignore[operator]
    assert [(r.arm, r.status) for r in rows] == [("disabled", "inconclusive")], rows
    # a single-arm run: no row here; the registry's row (inconclusive) says there was nothing to compare
    one = CheckInput(ChecksCfg(), ("branching",), "branching", ("w",),
                     {("w", "branching"): records[("w", "branching")]}, {("w", "branching"): sums[("w", "branching")]},
                     {}, 0)
    assert check(one) == []  # type: ignore[operator]


def test_smoke_with_the_cache_on_arm_as_baseline_is_refused_before_it_runs(tmp_path: Path) -> None:
    # Since 2026-11-30 the plan refuses it (hybridbench.checks.subjects): nothing would be compared, so no server
    # starts and no directory is left behind; the check-level rows above remain for a re-scoring.
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                           "checks.baseline_arm=branching", f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 2, proc.stdout[-800:] + proc.stderr[-800:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: checks.enabled: ttft compares each arm with the baseline arm branching, and no other arm"), proc.stderr
    assert not (tmp_path / "bundle.json").exists()
