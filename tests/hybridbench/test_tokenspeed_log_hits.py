"""engine=tokenspeed's trial snapshot: the "#cached-token" total of its own log lines, and the promise that it must
equal the usage hits (the cache_hits check's usage-vs-log row; the tokenspeed tier runs it on a log TokenSpeed's
own batch logger wrote, tests/tokenspeed/test_log_cross_check.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from hybridbench.engines.evictions import Evictions
from hybridbench.engines.process import ServerProcess
from hybridbench.engines.server import SnapshotMark
from hybridbench.engines.server_auth import NO_AUTH
from hybridbench.engines.tokenspeed import TokenSpeedEngine
from hybridbench.records.schema import LOG_COUNTS_USAGE_HITS

# TokenSpeed 0.1.0's format (runtime/execution/model_executor.py) and 0.1.1's (runtime/engine/batch_log.py, with
# "#dp-rank:" and "Mix batch." for rounds that extend and decode at once).
LOG = """\
[2026-11-25 00:00:01] Prefill batch. #new-seq: 1, #new-token: 128, #cached-token: 0, #running-req: 1, #queue-req: 2
[2026-11-25 00:00:01] Prefill batch. #new-seq: 2, #new-token: 128, #cached-token: 192, #running-req: 2, #queue-req: 1
[2026-11-25 00:00:01] Mix batch. #dp-rank: 0, #new-seq: 1, #new-token: 46, #cached-token: 256, #running-req: 3, \
#queue-req: 0
[2026-11-25 00:00:02] Decode batch. #dp-rank: 0, #running-req: 3, avg_seq_len: 0.0, #pages(active/cached/total): \
12/0/64, page ratio: 0.19, gen throughput (token/s): 0.00, #queue-req: 0
"""


def test_snapshot_totals_the_log_and_asks_for_the_cross_check(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("before the trial: Prefill batch. #new-seq: 1, #cached-token: 999\n")
    mark = SnapshotMark(log.stat().st_size, None, Evictions(None, None))
    log.write_text(log.read_text() + LOG)
    server = SimpleNamespace(log_path=log, base_url="http://127.0.0.1:9", auth=NO_AUTH)  # nothing listens: no metrics
    snap: dict[str, Any] = TokenSpeedEngine().snapshot(cast(ServerProcess, server), mark)
    assert snap["log_cached_tokens"] == 192 + 256  # the Mix line counts; lines before the mark do not
    assert snap["log_prefill_batches"] == 3
    assert snap[LOG_COUNTS_USAGE_HITS] is True


def test_usage_and_log_that_both_counted_nothing_agree_about_nothing() -> None:
    # A build whose responses carry no cached_tokens (None: 0 in the sum) beside a log whose lines the parser no
    # longer reads (no prefill line: a total of 0): "usage 0, log 0" passed the cross-check built to catch either.
    from hybridbench.checks.base import CheckInput
    from hybridbench.checks.builtin import cache_hits
    from hybridbench.config.schema import ChecksCfg
    from hybridbench.records.coverage import TrialOutcome
    from hybridbench.records.schema import Record

    def row(cached: int | None, snap: dict[str, Any]) -> tuple[str, str]:
        recs = [Record("run", "t0", "branching", "w", 0, i, i, 0, 0.0, 0.0, 0.1, 0.2, 300, 6, cached, "ok")
                for i in range(4)]
        key = ("w", "branching")
        inp = CheckInput(ChecksCfg(), ("branching",), "branching", ("w",), {key: recs}, {},
                         {key: [{LOG_COUNTS_USAGE_HITS: True, **snap}]}, 0,
                         trials={key: [TrialOutcome("t0", "w", "branching", 0, "ran", 4)]})
        (r,) = [r for r in cache_hits(inp) if r.workload == "w/log"]
        return r.status, r.detail

    status, detail = row(None, {"log_cached_tokens": 0, "log_prefill_batches": 3})
    assert status == "inconclusive" and "4 completed request(s) with no usage cached_tokens" in detail
    status, detail = row(0, {"log_cached_tokens": 0, "log_prefill_batches": 0})
    assert status == "inconclusive" and "no prefill line of the server log parsed" in detail
    assert row(64, {"log_cached_tokens": 256, "log_prefill_batches": 3})[0] == "pass"
    assert row(0, {"log_cached_tokens": 0, "log_prefill_batches": 3})[0] == "pass"  # really no hit, both counted
