"""``cache_hits``' usage-vs-log row against a log TokenSpeed's own code wrote.

Six requests sharing prefixes run concurrently through the real scheduler (``tokenspeed-scheduler`` 0.1.0, with
``--enable-mixed-batch``'s mixed prefill/decode rounds), every round logged by TokenSpeed 0.1.1's own batch logger
(``runtime/engine/batch_log.py``, the lines ``ts serve`` prints) and each request's usage ``cached_tokens``
counted as TokenSpeed's engine counts it (``scheduler_driver.py``). hybridbench's log parser reads that log as it
reads a server's, and the check compares the total with the recorded hits: equal passes, a lost or misread hit
fails, and so does a parser that misses the "Mix batch." lines. Build with ``bash tests/tokenspeed/build_env.sh``.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from functools import cache

import pytest
from tokenspeed_env import HERE, PYTHON, SCHEDULER_010, pythonpath, release, require

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import cache_hits
from hybridbench.config.schema import ChecksCfg
from hybridbench.engines.server_logs import LogStats
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.schema import LOG_COUNTS_USAGE_HITS, Record

pytestmark = [pytest.mark.tokenspeed, pytest.mark.slow]

FOLDERS = (release("0.1.1"), SCHEDULER_010)

require(*FOLDERS, what="env")

A = list(range(1, 301))
CONFIG = {"page_size": 64, "device_pages": 64, "chunk": 128, "host_pages": 0, "mamba": True, "state_slots": 64,
          "mamba_l2": False, "host_state_slots": 0, "mixed": True}
PROMPTS = [A] + [A[:200 + 20 * k] + list(range(1000 * k, 1000 * k + 50)) for k in range(1, 6)]


@cache
def served() -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(usage cached_tokens per request, the log lines) of one concurrent run."""
    payload = [{"config": CONFIG, "requests": [{"tokens": p, "outputs": list(range(900_000, 900_006))}
                                               for p in PROMPTS]}]
    proc = subprocess.run([str(PYTHON), str(HERE / "scheduler_driver.py"), "concurrent"], input=json.dumps(payload),
                          env={**os.environ, "PYTHONPATH": pythonpath(*FOLDERS)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = json.loads(proc.stdout.splitlines()[-1])
    return tuple(run["cached_tokens"]), tuple(run["log"].splitlines())


def records(hits: tuple[int, ...]) -> list[Record]:
    return [Record("run", "t0", "branching", "w", 0, i, i, 0, 0.0, 0.0, 0.1, 0.2, len(p), 6, h, "ok")
            for i, (p, h) in enumerate(zip(PROMPTS, hits, strict=True))]


def log_row(recs: list[Record], log_lines: tuple[str, ...] | list[str]) -> tuple[str, str]:
    """The cache_hits row for one trial whose snapshot carries the parsed log total."""
    snap = {"log_cached_tokens": LogStats().feed_all(log_lines).cached_tokens, LOG_COUNTS_USAGE_HITS: True}
    key = ("w", "branching")
    inp = CheckInput(ChecksCfg(min_token_hit_rate=0.0), ("branching",), "branching", ("w",), {key: recs}, {},
                     {key: [snap]}, 0, trials={key: [TrialOutcome("t0", "w", "branching", 0, "ran", len(recs))]})
    (row,) = [r for r in cache_hits(inp) if r.workload == "w/log"]
    return row.status, row.detail


def test_the_real_log_has_mixed_rounds_and_hits() -> None:
    hits, log = served()
    assert sum(hits) > 0 and any("Mix batch." in line for line in log)
    assert any("#dp-rank: 0" in line for line in log)  # 0.1.1's field, unknown to SGLang's lines


def test_usage_and_the_parsed_log_agree() -> None:
    hits, log = served()
    status, detail = log_row(records(hits), log)
    assert status == "pass", detail
    assert f"usage {sum(hits)}, log {sum(hits)}" in detail


def test_a_lost_hit_fails_the_row() -> None:
    hits, log = served()
    recs = records(hits)
    i = max(range(len(recs)), key=lambda k: hits[k])
    recs[i] = replace(recs[i], cached_tokens=0)  # a response whose usage the client misread
    status, detail = log_row(recs, log)
    assert status == "fail" and f"usage {sum(hits) - hits[i]}, log {sum(hits)}" in detail


def test_a_parser_blind_to_mix_lines_fails_the_row() -> None:
    hits, log = served()
    status, _ = log_row(records(hits), [line for line in log if "Mix batch." not in line])
    assert status == "fail"


def test_a_failed_request_makes_the_row_inconclusive() -> None:
    hits, log = served()
    recs = records(hits)
    i = max(range(len(recs)), key=lambda k: hits[k])
    recs[i] = replace(recs[i], cached_tokens=None, status="error")  # prefilled and logged, never answered
    status, _ = log_row(recs, log)
    assert status == "inconclusive"
