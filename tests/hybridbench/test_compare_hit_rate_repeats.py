"""compare's token_hit_rate row over every repeat of each run, and a zero spread between repeats that decides only
where the repeats hit alike request by request."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_compare import verdicts, write_run

from hybridbench.compare.__main__ import main


def _edit(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    lines = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    for r in lines:
        change(r)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_candidate_repeats_the_baseline_lacks_reach_the_hit_rate_interval(tmp_path: Path) -> None:
    """Rows built from request pairs keyed by (repeat, index) saw only the candidate's repeats 0 and 1: its repeats 2
    and 3 hit nothing, and the row passed at "0.25 -> 0.25" (exit 0)."""
    a = write_run(tmp_path / "a", repeats=2)
    b = write_run(tmp_path / "b", repeats=4)

    def cold(r: dict[str, Any]) -> None:
        if r["repeat"] >= 2:
            r["cached_tokens"] = 0
    _edit(b, cold)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] != "pass", row
    assert row["base"] == 0.25 and row["candidate"] == 0.125, row  # the mean of 0.25, 0.25, 0, 0
    assert row["low"] < -0.02, row  # type: ignore[operator]


def test_the_advisory_counts_each_runs_own_repeats(tmp_path: Path) -> None:
    # One baseline repeat against three candidate ones: "1 baseline and 1 candidate repeat(s)" was printed, the
    # candidate's count taken from the repeats both runs share.
    a, b = write_run(tmp_path / "a", repeats=1), write_run(tmp_path / "b", repeats=3)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and "1 baseline and 3 candidate repeat(s)" in str(row["detail"]), row


def test_a_zero_spread_decides_only_where_the_repeats_hit_alike_request_by_request(tmp_path: Path) -> None:
    """Two repeats a side with equal rates gave a zero-width interval that passed outright, though requests hit
    differently from one repeat to the next (a server under concurrency whose totals happened to agree)."""
    a, b = write_run(tmp_path / "a", repeats=2), write_run(tmp_path / "b", repeats=2)

    def shuffled(r: dict[str, Any]) -> None:  # repeat 1 moves hits between requests, the total kept
        if r["repeat"] == 1:
            r["cached_tokens"] = 60 if r["request_index"] % 2 == 0 else 40
    _edit(b, shuffled)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and row["base"] == row["candidate"] == 0.25, row
    assert "hit differently" in str(row["detail"]), row
    # Repeats alike request by request (a deterministic replay, or a server that happened to repeat itself) decide.
    assert main([str(a), str(write_run(tmp_path / "c", repeats=2))]) == 0
    assert verdicts(tmp_path / "c")[("seglen", "token_hit_rate")]["status"] == "pass"
