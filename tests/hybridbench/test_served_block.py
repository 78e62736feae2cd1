"""A run whose server served another block (page) than its plan computed is marked, from its saved files alone.

vLLM sizes a hybrid model's block itself; the plan computes it (hybridbench/engines/vllm_page.py) and the run records
it per arm (``planned_page``) beside the block each server reports on its /metrics (``served_page``). Where the two
differ (vLLM's alignment on a real GPU, or a newer vLLM, chose another), the plan's hit granularity and forecast
described a server that never ran: the verdict must not read as a clean pass. Where either is unknown, nothing is
said. The runs here are copies of a saved run with only those two provenance entries changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hybridbench.report.markdown import render_report
from hybridbench.rescore.__main__ import main as rescore
from hybridbench.results import read_run
from hybridbench.results.cli import main as results
from hybridbench.results.marks import verdict_marks
from hybridbench.results.store import load_store

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "fbde869-smoke-sim"  # arms disabled, branching; a pass
MARK = "served another block than planned: disabled 544 tokens (planned 272)"
WARNING = ("**Served another block than planned** (arm `disabled` served 544-token blocks, the plan computed 272; "
           "`served_page` and `planned_page` in bundle.json)")


def _run(root: Path, planned: object, served: object) -> Path:
    run = Path(shutil.copytree(FIXTURE, root / "runs" / "run"))
    bundle: dict[str, Any] = json.loads((run / "bundle.json").read_text())
    extra = bundle["provenance"]["engine"]["extra"]
    for key, value in (("planned_page", planned), ("served_page", served)):
        if value is not None:
            extra[key] = value
    (run / "bundle.json").write_text(json.dumps(bundle))
    return run


def _bundle(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "bundle.json").read_text())
    return data


@pytest.mark.parametrize(("planned", "served", "mark"), [
    # the disabled arm's server aligned to 544 where the plan computed 272: marked, naming the arm and both blocks
    ({"disabled": 272, "branching": 272}, {"disabled": 544, "branching": 272}, MARK),
    # both arms served the planned block
    ({"disabled": 272, "branching": 272}, {"disabled": 272, "branching": 272}, None),
    # the plan could not say it ("sized by vLLM at start-up": no planned_page), the CPU build's 128 served
    (None, {"disabled": 128, "branching": 128}, None),
    # a server that did not report one (no /metrics answer), or a bundle written before served_page was recorded
    ({"disabled": 272, "branching": 272}, {"branching": 272}, None),
    ({"disabled": 272, "branching": 272}, None, None),
    # hand-edited values that are no block: nothing to compare
    ({"disabled": 272}, {"disabled": True}, None),
    ({"disabled": 272}, ["disabled", 544], None),
])
def test_a_served_block_other_than_the_planned_one_marks_the_verdict(
        tmp_path: Path, planned: object, served: object, mark: str | None) -> None:
    run = _run(tmp_path, planned, served)
    report, saved = render_report(_bundle(run)), read_run(run)
    assert saved.bundle is not None and saved.bundle.verdict == "pass"  # the verdict itself stays the checks'
    if mark is None:
        assert verdict_marks(saved) == ()
        assert "Served another block" not in report
    else:
        assert verdict_marks(saved) == (mark,)
        # above the measurements, where a reader of the report starts, not only beside the verdict
        assert report.index(WARNING) < report.index("## checks") < report.index("verdict: **pass**"), report


def test_the_mark_follows_the_run_through_results_rescore_and_the_baseline_choice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, {"disabled": 272, "branching": 272}, {"disabled": 544, "branching": 272})
    assert results(["show", str(run)]) == 0
    assert f"verdict pass [{MARK}]" in capsys.readouterr().out
    # a marked run is never `compare latest:`'s baseline (store.latest_passing_main takes only unmarked runs)
    assert list(load_store(tmp_path / "runs").runs["marks"]) == [MARK]
    # re-scoring from the saved files keeps the warning in the report it rewrites, and the mark (today's rules score
    # this one-repeat run inconclusive: exit 1)
    assert rescore([str(run)]) == 1
    assert WARNING in (run / "report.md").read_text()
    assert verdict_marks(read_run(run)) == ("re-scored", MARK)
