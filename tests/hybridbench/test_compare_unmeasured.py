"""`python -m hybridbench.compare` never passes over what one run did not measure: a hit count or a repeat's figure
that one side left unknown makes its row undecided (red-team findings; each test failed on the code before its fix)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_compare import verdicts, write_run

from hybridbench.compare.__main__ import main


def _edit(run: Path, change: Any) -> Path:
    lines = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    for r in lines:
        change(r)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_a_candidate_that_reports_no_hit_counts_beside_a_baseline_that_does_is_undecided(tmp_path: Path) -> None:
    # The PR's build stopped reporting cached_tokens (its hit rate unknown, perhaps 0): the token_hit_rate rows
    # skipped as "the candidate reported no cached-token count" and the comparison passed on timings, exit 0.
    a = write_run(tmp_path / "a")
    b = _edit(write_run(tmp_path / "b"), lambda r: r.update(cached_tokens=None))
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and "candidate 60 of 60" in str(row["detail"]), row
    assert json.loads((b / "compare" / "compare.json").read_text())["verdict"] == "inconclusive"
    # The other way round (main's build reported none) is as unknown; neither reporting any is still a skip.
    c = _edit(write_run(tmp_path / "c"), lambda r: r.update(cached_tokens=None))
    assert main([str(c), str(write_run(tmp_path / "d"))]) == 1
    assert verdicts(tmp_path / "d")[("seglen", "token_hit_rate")]["status"] == "inconclusive"
    assert main([str(c), str(b)]) == 0  # an engine without hit counts: its timings decide
    assert verdicts(b)[("seglen", "token_hit_rate")]["status"] == "skip"


def _modelled(run: Path) -> Path:
    """The run as the reference server's, judged on its modelled clock (stamps equal to the measured times)."""
    plan = json.loads((run / "plan.json").read_text())
    plan["config"]["engine"]["timing"] = "modelled"
    (run / "plan.json").write_text(json.dumps(plan))
    return _edit(run, lambda r: r.update(modelled_received_s=r["sent_s"], modelled_first_token_s=r["first_token_s"],
                                         modelled_end_s=r["end_s"]))


def test_a_repeat_without_a_figure_is_not_dropped_from_the_timing_rows(tmp_path: Path) -> None:
    # Three repeats a side; the candidate's third seglen repeat ran three times slower and one of its completed
    # requests carried no modelled first-token stamp, so that repeat's modelled mean TTFT was NaN. The comparison
    # dropped the repeat and passed TTFT and throughput on the other two (exit 0).
    a = _modelled(write_run(tmp_path / "a", engine="reference"))
    b = _modelled(write_run(tmp_path / "b", engine="reference"))

    def slow_third_repeat(r: dict[str, Any]) -> None:
        if r["arm"] == "seglen" and r["repeat"] == 2:
            r["modelled_first_token_s"] = r["sent_s"] + 3 * (r["first_token_s"] - r["sent_s"])
            r["modelled_end_s"] = r["modelled_first_token_s"] + 3 * (r["end_s"] - r["first_token_s"])
            if r["request_index"] == 7:
                r["modelled_first_token_s"] = None

    _edit(b, slow_third_repeat)
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    for metric in ("ttft", "throughput"):
        row = v[("seglen", metric)]
        assert row["status"] == "inconclusive", row
        assert "005-w-seglen-r2" in str(row["detail"]) and "no modelled" in str(row["detail"]), row
    assert v[("lru", "ttft")]["status"] == "pass"  # the lru repeats all carry their figures
    # On the wall clock the same: a repeat whose completed requests saw no first token has no mean TTFT.
    c, d = write_run(tmp_path / "c"), write_run(tmp_path / "d")

    def no_first_token_in_the_third_repeat(r: dict[str, Any]) -> None:
        if r["arm"] == "seglen" and r["repeat"] == 2:
            r["first_token_s"] = None

    _edit(d, no_first_token_in_the_third_repeat)
    assert main([str(c), str(d)]) == 1
    row = verdicts(d)[("seglen", "ttft")]
    assert row["status"] == "inconclusive" and "005-w-seglen-r2" in str(row["detail"]), row


def test_a_regression_the_measured_repeats_show_still_fails_beside_an_unmeasured_one(tmp_path: Path) -> None:
    # An unknown repeat makes a pass undecided; it does not excuse a failure the other repeats show.
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", ttft_ms=160.0)

    def no_first_token_in_the_third_repeat(r: dict[str, Any]) -> None:
        if r["arm"] == "seglen" and r["repeat"] == 2:
            r["first_token_s"] = None

    _edit(b, no_first_token_in_the_third_repeat)
    assert main([str(a), str(b)]) == 1
    assert verdicts(b)[("seglen", "ttft")]["status"] == "fail"
