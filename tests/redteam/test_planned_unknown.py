"""A bundle written before trials counted their planned requests, with no trace left to count them: the highest
recorded index stood in for the plan, so a trial that lost its last requests looked whole and survival passed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hostile import clean, cli, load, make_run

pytestmark = pytest.mark.redteam


def _cut_tail(run: Path, trial_id: str, keep: int) -> None:
    """Drop the trial's records from request ``keep`` on, as a run killed before its tail would have."""
    lines = (run / "records.jsonl").read_text().splitlines()
    kept = [x for x in lines if not (json.loads(x)["trial_id"] == trial_id and json.loads(x)["request_index"] >= keep)]
    assert len(kept) < len(lines)
    (run / "records.jsonl").write_text("".join(x + "\n" for x in kept))


def _survival(run: Path) -> dict[str, dict[str, object]]:
    return {c["arm"]: c for c in load(run / "bundle.json")["checks"] if c["check"] == "survival"}


def test_rescore_without_a_planned_count_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    run = make_run(tmp_path, "old")
    shutil.rmtree(run / "traces", ignore_errors=True)  # nothing else says how many requests were planned
    _cut_tail(run, "001-gsp-branching-r0", 12)
    proc = cli("hybridbench.rescore", run, "checks.enabled=[survival]")
    clean(proc)
    rows = _survival(run)
    assert rows["branching"]["status"] == "inconclusive", rows["branching"]
    assert "planned" in str(rows["branching"]["detail"])
    assert proc.returncode == 1


def test_rescore_with_the_trace_counts_the_lost_tail(tmp_path: Path) -> None:
    # The fixture's trace (regenerated from its recorded generator arguments) says 18 were planned.
    run = make_run(tmp_path, "old")
    _cut_tail(run, "001-gsp-branching-r0", 12)
    proc = cli("hybridbench.rescore", run, "checks.enabled=[survival]")
    clean(proc)
    rows = _survival(run)
    assert rows["branching"]["status"] == "fail" and "12 of 18 planned" in str(rows["branching"]["detail"])
    assert rows["disabled"]["status"] == "pass"


def test_compare_without_a_planned_count_is_inconclusive_on_survival(tmp_path: Path) -> None:
    base, cand = make_run(tmp_path, "base", night=1), make_run(tmp_path, "cand", night=2)
    for run in (base, cand):
        shutil.rmtree(run / "traces", ignore_errors=True)
    _cut_tail(cand, "001-gsp-branching-r0", 12)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    deltas = {(d["arm"], d["metric"]): d for d in load(cand / "compare" / "compare.json")["deltas"]}
    assert deltas[("branching", "survival")]["status"] == "inconclusive", deltas[("branching", "survival")]
    assert "planned" in str(deltas[("branching", "survival")]["detail"])
