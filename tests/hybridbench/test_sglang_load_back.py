"""``host_hits`` decides on a real SGLang server from its own counters.

The server is SGLang's recorded answers (tests/fixtures/sglang_cpu: ``/server_info`` and ``/metrics`` of real 0.5.16
and 0.5.23 servers, which ran without a host tier and evicted nothing), with the radix-cache series each release's
own collector renders once its cache has evicted and loaded back (tests/fixtures/sglang_cpu/load_back_metrics.json,
held to SGLang's code by tests/sglang_oracle/test_sglang_load_back_metrics.py): two TP ranks, each counting the
same tokens. What SGLang exports and when:

- ``sglang:load_back_tokens_total`` and ``sglang:evicted_tokens_total``: one collector, both added by SGLang PR
  #10225, on every TP rank's cache when ``--enable-metrics`` is on; 0.5.23 labels each rank (and the load-back
  per host pool: ``kv``, ``mamba``), 0.5.9 / 0.5.16 do not, so their ``/metrics`` sums the ranks into one series;
- a labelled counter is exported only from its first increment: a fresh server shows neither.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.evictions import host_hits
from hybridbench.config.schema import ChecksCfg
from hybridbench.engines.evictions import EVICTED_TOKENS, LOAD_BACK_TOKENS, Evictions, one_rank, read_evictions
from hybridbench.engines.server_logs import PromSample, parse_prometheus_samples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"
sys.path.insert(0, str(FIXTURES))
from replay_server import exchanges  # noqa: E402

SERIES = json.loads((FIXTURES / "load_back_metrics.json").read_text())["releases"]
RECORDED = ("0.5.16", "0.5.23")  # the releases with recorded /server_info and /metrics answers
TP = 2  # the fixture's ranks


@functools.cache
def recorded(version: str, path: str) -> Any:
    (e,) = [e for e in exchanges(version) if e["path"] == path and e["method"] == "GET"]
    return e["response"]


class Server:
    """/server_info and /metrics as the scrapes go: ``metrics`` is what the next scrape answers (None: 404)."""

    def __init__(self, server_info: Any, metrics: str | None) -> None:
        self.server_info, self.metrics = server_info, metrics


@contextmanager
def serving(state: Server) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (json.dumps(state.server_info) if self.path == "/server_info" else
                    state.metrics if self.path == "/metrics" else None)
            if body is None:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def trials(version: str, scenario: str, *, metrics: bool = True) -> list[dict[str, Any]]:
    """Each trial's snapshot, read as the harness reads it: a scrape before and after, the difference."""
    text = "\n".join(recorded(version, "/metrics"))  # the real server's own series: no radix-cache ones yet
    scrapes = [text + "\n" + extra for extra in SERIES[version]["scenarios"][scenario]]
    state = Server(recorded(version, "/server_info"), scrapes[0] if metrics else None)
    out = []
    with serving(state) as url:
        before = read_evictions(url, metrics_ranks=TP)
        for scrape in scrapes[1:]:
            state.metrics = scrape if metrics else None
            after = read_evictions(url, metrics_ranks=TP)
            out.append(after.since(before).snapshot())
            before = after
    return out


def verdict(snaps: list[dict[str, Any]]) -> tuple[str, str]:
    inp = CheckInput(ChecksCfg(), ("branching", "l2"), "branching", ("w",), {}, {}, {("w", "l2"): snaps}, 0)
    (result,) = host_hits(inp)
    return result.status, result.detail


@pytest.mark.parametrize("version", RECORDED)
def test_the_recorded_answers_alone_cannot_decide(version: str) -> None:
    """The red team's finding, kept: the recorded server (no host tier, nothing evicted) says nothing either way."""
    state = Server(recorded(version, "/server_info"), "\n".join(recorded(version, "/metrics")))
    with serving(state) as url:
        reading = read_evictions(url, metrics_ranks=TP)
        snap = read_evictions(url, metrics_ranks=TP).since(reading).snapshot()
    assert (reading.tokens, reading.states, reading.host_loaded) == (None, None, None)
    assert snap == {"evicted_tokens": None, "evicted_states": None, "host_loaded_tokens": None}
    assert verdict([snap])[0] == "inconclusive"


@pytest.mark.parametrize("version", RECORDED)
def test_host_hits_decides_from_sglangs_load_back_counter(version: str) -> None:
    snaps = trials(version, "l2")
    # One rank's count, never the ranks' sum: the first trial starts on a fresh server, where neither counter
    # was exported yet (so from 0); the second is the difference of two scrapes that have both.
    assert snaps == [{"evicted_tokens": 4096.0, "evicted_states": None, "host_loaded_tokens": 1536.0},
                     {"evicted_tokens": 1024.0, "evicted_states": None, "host_loaded_tokens": 512.0}]
    assert verdict(snaps) == ("pass", "2048 KV tokens loaded back from the host over 2 repeat(s)")


@pytest.mark.parametrize("version", RECORDED)
def test_evictions_without_a_load_back_fail(version: str) -> None:
    # The collector that counts load-back counted evictions: its load-back counter, never exported, is 0.
    snaps = trials(version, "no_load_back")
    assert snaps == [{"evicted_tokens": 4096.0, "evicted_states": None, "host_loaded_tokens": 0.0}]
    assert verdict(snaps)[0] == "fail"


@pytest.mark.parametrize("version", RECORDED)
def test_no_counter_seen_or_metrics_off_is_inconclusive(version: str) -> None:
    # Nothing exported at all: no eviction and no load-back, or a server whose collector is missing; never a pass.
    quiet = trials(version, "quiet")
    assert quiet == [{"evicted_tokens": None, "evicted_states": None, "host_loaded_tokens": None}]
    assert verdict(quiet)[0] == "inconclusive"
    off = trials(version, "l2", metrics=False)  # without --enable-metrics SGLang has no /metrics route
    assert {s["host_loaded_tokens"] for s in off} == {None}
    assert verdict(off) == ("inconclusive", "no host load-back counter for every trial")


def test_one_rank_is_read_never_the_ranks_sum() -> None:
    def read(version: str, scrape: int) -> tuple[float | None, float | None]:
        s = parse_prometheus_samples(SERIES[version]["scenarios"]["l2"][scrape])
        return one_rank(s, EVICTED_TOKENS, TP), one_rank(s, LOAD_BACK_TOKENS, TP)

    # 0.5.9 / 0.5.16: one series, the ranks added up by /metrics; 0.5.23: a series per rank, and per host pool.
    for version in ("0.5.9", "0.5.16", "0.5.23"):
        assert read(version, 1) == (4096.0, 1536.0) and read(version, 2) == (5120.0, 2048.0), version
    dp = [PromSample(LOAD_BACK_TOKENS, {"tp_rank": str(t), "dp_rank": str(d), "pool": "kv"}, 100.0 * (d + 1))
          for t in range(2) for d in range(2)]
    assert one_rank(dp, LOAD_BACK_TOKENS, 4) == 300.0  # data-parallel groups serve their own requests: added
    assert one_rank([PromSample(LOAD_BACK_TOKENS, {"pool": "mamba"}, 3.0)], LOAD_BACK_TOKENS) is None


def test_the_reference_servers_field_is_the_only_source_where_it_exists() -> None:
    """The reference server reads host load-back from /server_info; a /metrics counter beside it is not added."""
    both = "sglang:evicted_tokens_total 10\nsglang:load_back_tokens_total 7000\n"
    state = Server({"internal_states": [{"host_load_back_tokens": 64, "evicted_mamba_states": 2}]}, both)
    with serving(state) as url:
        before = read_evictions(url)
        state.server_info = {"internal_states": [{"host_load_back_tokens": 320, "evicted_mamba_states": 5}]}
        state.metrics = both.replace("7000", "9000").replace(" 10", " 40")
        after = read_evictions(url)
        state.server_info = {}  # a scrape from the other source: the two never mix
        other = read_evictions(url)
    assert (before.host_source, after.host_source, other.host_source) == ("server_info", "server_info", "metrics")
    assert after.since(before).snapshot() == {"evicted_tokens": 30.0, "evicted_states": 3.0,
                                              "host_loaded_tokens": 256.0}
    assert other.since(before).host_loaded is None and after.since(other).host_loaded is None
    assert Evictions(5.0, None, 9.0, host_source="metrics").since(Evictions(None, None, None)).snapshot() == {
        "evicted_tokens": None, "evicted_states": None, "host_loaded_tokens": None}  # a failed scrape is unknown


def test_sglang_reads_as_many_ranks_as_it_launches() -> None:
    from hybridbench.config.schema import RunCfg
    from hybridbench.engines.launchers import make_sglang_engine

    cfg = RunCfg()
    cfg.engine.tp = 4
    ranks = make_sglang_engine().spec.metrics_ranks
    assert ranks is not None and ranks(cfg) == 4


@pytest.mark.parametrize("version", sorted(SERIES))
@pytest.mark.parametrize("dp_flag", [["--dp-size", "2"], ["--dp-size=2"], ["--data-parallel-size", "2"]])
def test_data_parallel_attention_counts_every_group_once(version: str, dp_flag: list[str]) -> None:
    """TP 4 in two DP attention groups of two ranks: 0.5.9 and 0.5.16 add the four ranks into one series (each
    group's count twice), 0.5.23 labels them; either way a trial's count is the two groups' total."""
    from hybridbench.config.schema import RunCfg
    from hybridbench.engines.launchers import make_sglang_engine

    cfg = RunCfg()
    cfg.engine.tp = 4
    cfg.engine.extra_args = ["--enable-dp-attention", *dp_flag]
    ranks = make_sglang_engine().spec.metrics_ranks
    assert ranks is not None
    start, after = (parse_prometheus_samples(t) for t in SERIES[version]["scenarios"]["dp_attention"])
    assert one_rank(start, EVICTED_TOKENS, ranks(cfg)) is None  # nothing counted yet
    assert one_rank(after, EVICTED_TOKENS, ranks(cfg)) == 4096 + 1024
    assert one_rank(after, LOAD_BACK_TOKENS, ranks(cfg)) == 1536 + 512
