"""`python -m hybridbench.compare` against a baseline slowed on purpose (``engine.prefill_slowdown``, the noise
experiment's planted regression): its timings are not the build's, so they never pass a candidate (red-team finding;
the test failed on the code before its fix)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_compare import verdicts, write_run
from test_compare_unmeasured import _edit, _modelled

from hybridbench.compare.__main__ import main


def _slower(run: Path, arm: str, factor: float, planted: float = 0.0) -> Path:
    """``arm``'s requests ``factor`` times as long to their first token on the modelled clock; ``planted``: the run's
    config says its server was slowed on purpose by that fraction."""
    if planted:
        plan = json.loads((run / "plan.json").read_text())
        plan["config"]["engine"]["prefill_slowdown"] = {arm: planted}
        (run / "plan.json").write_text(json.dumps(plan))

    def slow(r: dict[str, Any]) -> None:
        if r["arm"] == arm:
            r["modelled_first_token_s"] = r["sent_s"] + factor * (r["first_token_s"] - r["sent_s"])

    return _edit(run, slow)


def test_a_baseline_slowed_on_purpose_never_passes_a_slower_candidate(tmp_path: Path) -> None:
    # Main's run planted a 25% prefill slowdown on seglen (engine.prefill_slowdown={seglen: 0.25}); the PR's seglen is
    # 15% slower than main's real one. Against the slowed baseline it read -8% and passed (exit 0).
    base = _slower(_modelled(write_run(tmp_path / "main", engine="reference")), "seglen", 1.25, planted=0.25)
    cand = _slower(_modelled(write_run(tmp_path / "pr", engine="reference")), "seglen", 1.15)
    assert main([str(base), str(cand)]) == 1
    row = verdicts(cand)[("seglen", "ttft")]
    assert row["status"] == "inconclusive" and "engine.prefill_slowdown" in str(row["detail"]), row
    assert verdicts(cand)[("lru", "ttft")]["status"] == "pass"  # lru was not slowed: compared as ever
    # A candidate slowed on purpose is what a planted regression tests: it fails as any slower build does.
    planted = _slower(_modelled(write_run(tmp_path / "planted", engine="reference")), "seglen", 1.25, planted=0.25)
    plain = _modelled(write_run(tmp_path / "plain", engine="reference"))
    assert main([str(plain), str(planted)]) == 1
    assert verdicts(planted)[("seglen", "ttft")]["status"] == "fail"
