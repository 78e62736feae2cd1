"""benchmarks/whole_commands.py's main-job target reads the verdict cells of the report hybridbench really renders
(hybridbench.report.markdown): a run meets it only when every ttft and throughput row is a pass or a fail."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hybridbench.report.markdown import render_report

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from whole_command import Summary  # noqa: E402
from whole_commands import _decided  # noqa: E402

RUN = ROOT / "tests" / "hybridbench" / "fixtures" / "runs" / "fbde869-smoke-sim"
BUNDLE: dict[str, Any] = json.loads((RUN / "bundle.json").read_text())
QUICK = Summary("ours", 1, 200.0, 190.0, 300.0)


def report_with(status: str) -> str:
    bundle = copy.deepcopy(BUNDLE)
    (row,) = [c for c in bundle["checks"] if c["check"] == "ttft"]
    row["status"] = status
    return render_report(bundle)


@pytest.mark.parametrize(("status", "met"), [("pass", True), ("fail", True), ("inconclusive", False)])
def test_only_passes_and_fails_count_as_decided(status: str, met: bool) -> None:
    figure, ok = _decided(300.0)(QUICK, report_with(status))
    assert ok is met, figure
    assert figure.endswith(f"{2 if met else 1} of 2 rows decided")  # the throughput row passes throughout


def test_a_row_no_load_asks_for_is_none_to_decide_but_a_run_with_none_asked_misses() -> None:
    # a skip row (workloads.<load>.judged_by leaves the check out, as seglen's CPU ShareGPT load does) is not judged
    figure, ok = _decided(300.0)(QUICK, report_with("skip"))
    assert ok and figure.endswith("1 of 1 rows decided"), figure
    bundle = copy.deepcopy(BUNDLE)
    for row in bundle["checks"]:
        if row["check"] in ("ttft", "throughput"):
            row["status"] = "skip"
    figure, ok = _decided(300.0)(QUICK, render_report(bundle))
    assert not ok and figure.endswith("0 of 0 rows decided"), figure


def test_a_decided_run_over_the_time_bound_or_a_report_without_timing_rows_misses() -> None:
    assert not _decided(300.0)(Summary("ours", 1, 301.0, 190.0, 300.0), report_with("pass"))[1]
    assert not _decided(300.0)(QUICK, "verdict: **pass**\n")[1]
