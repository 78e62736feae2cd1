"""A record that says ``ok`` but has no end time, or one before its send (a driver bug, a clock stepped back): its
request counted as completed inside a duration that never saw it, so the candidate's throughput rose and the
timing and survival verdicts passed on times nobody measured."""

from __future__ import annotations

from typing import Any

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import survival, throughput, ttft
from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.summary import summarize
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.schema import Record


def _trial(arm: str, repeat: int, broken: str) -> list[Record]:
    out = []
    for i in range(10):
        sent, end = i * 0.5, i * 0.5 + 0.4
        rec = Record("run", f"{repeat}-{arm}", arm, "w", repeat, i, i, 0, sent, sent, sent + 0.1, end, 100, 4, 50,
                     "ok")
        if i == 9 and broken == "no end":
            rec.end_s = None
        elif i == 9 and broken == "end before send":
            rec.end_s = sent - 3.0
        out.append(rec)
    return out


@pytest.mark.parametrize("broken", ["no end", "end before send"])
def test_an_ok_record_without_a_consistent_end_time_passes_no_timing_or_survival_check(broken: str) -> None:
    records: dict[tuple[str, str], list[Record]] = {("w", "lru"): [], ("w", "seglen"): []}
    sums: dict[tuple[str, str], list[dict[str, Any]]] = {("w", "lru"): [], ("w", "seglen"): []}
    trials: dict[tuple[str, str], list[TrialOutcome]] = {("w", "lru"): [], ("w", "seglen"): []}
    for r in range(3):
        for arm in ("lru", "seglen"):
            recs = _trial(arm, r, broken if arm == "seglen" else "")
            records[("w", arm)] += recs
            sums[("w", arm)].append(summarize(recs))
            trials[("w", arm)].append(TrialOutcome(f"{r}-{arm}", "w", arm, r, "ran", 10))
    inp = CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), records, sums, {}, 0, trials=trials)
    for check in (ttft, throughput, survival):
        row = next(x for x in check(inp) if x.arm == "seglen")
        assert row.status == "inconclusive", (check.__name__, row)
        assert "end time" in row.detail, row.detail
    assert next(x for x in survival(inp) if x.arm == "lru").status == "pass"



def test_prefill_overhead_does_not_pass_over_an_ok_record_without_an_end_time() -> None:
    from hybridbench.checks.correctness import prefill_overhead

    records = {("w", a): [r for rep in range(3) for r in _trial(a, rep, "no end" if a == "lru" else "")]
               for a in ("disabled", "lru")}
    sums = {k: [summarize([r for r in v if r.repeat == rep]) for rep in range(3)] for k, v in records.items()}
    inp = CheckInput(ChecksCfg(min_prefill_throughput_ratio=0.85), ("disabled", "lru"), "disabled", ("w",), records,
                     sums, {}, 0, cache_off=frozenset({"disabled"}))
    (row,) = prefill_overhead(inp)
    assert row.status == "inconclusive" and "end time" in row.detail, row
