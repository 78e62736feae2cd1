"""SGLang batch log lines, the LogStats accumulator, Prometheus text and the cache counters."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hybridbench.engines.server_logs import (
    CacheCounters,
    LogStats,
    cache_counters,
    parse_prometheus,
    parse_prometheus_samples,
    parse_sglang_log_line,
    parse_tree_cache_impl,
    startup_cache_impl,
)

FIXTURES = Path(__file__).parent / "fixtures"
LOG = (FIXTURES / "sglang_server.log").read_text().splitlines()
SGLANG_PROM = (FIXTURES / "sglang_metrics.prom").read_text()
VLLM_PROM = (FIXTURES / "vllm_metrics.prom").read_text()


def test_seed_decode_line() -> None:
    s = parse_sglang_log_line(LOG[2])
    assert s is not None
    assert s.kind == "decode"
    assert s.timestamp == "2025-10-05 18:37:30"
    assert s.ranks == {"TP": 0, "EP": 0}
    assert (s.running_req, s.full_token, s.mamba_num, s.queue_req) == (235, 818755, 470, 789)
    assert (s.token_usage, s.mamba_usage, s.gen_throughput, s.cuda_graph) == (0.99, 0.46, 7752.32, True)
    assert s.new_token is None and s.cached_token is None


def test_seed_prefill_line() -> None:
    s = parse_sglang_log_line(LOG[3])
    assert s is not None
    assert s.kind == "prefill"
    assert (s.new_seq, s.new_token, s.cached_token, s.running_req, s.queue_req) == (4, 15775, 0, 220, 799)
    assert (s.token_usage, s.mamba_usage) == (0.0, 0.0)


def test_mangled_prefix_snapshot_format_and_old_format() -> None:
    mangled = parse_sglang_log_line(LOG[5])  # the seed's markdown-mangled prefix: fields still parse
    assert mangled is not None and mangled.new_token == 15821 and mangled.ranks == {"TP": 0, "EP": 0}
    snap = parse_sglang_log_line(LOG[6])  # "Prefill batch," with pending/input throughput, DP rank
    assert snap is not None
    assert snap.ranks == {"DP": 1, "TP": 1}
    assert (snap.cached_token, snap.new_token, snap.pending_token, snap.cuda_graph) == (3840, 640, 0, False)
    assert snap.input_throughput == 18233.10
    decode = parse_sglang_log_line(LOG[7])
    assert decode is not None and decode.fields["accept len"] == 2.31 and decode.mamba_usage == 0.55
    old = parse_sglang_log_line(LOG[8])  # "#token" and "token usage" without "full"
    assert old is not None and old.full_token == 1204 and old.token_usage == 0.01 and old.mamba_usage is None
    bare = parse_sglang_log_line(LOG[9])  # no prefix at all, fields in another order
    assert bare is not None and bare.timestamp is None and bare.ranks == {}
    assert (bare.cached_token, bare.new_token, bare.token_usage) == (256, 23, 0.02)


@pytest.mark.parametrize("index", [0, 1, 4, 10])
def test_other_lines_are_not_samples(index: int) -> None:
    assert parse_sglang_log_line(LOG[index]) is None


def test_log_stats_over_the_fixture() -> None:
    stats = LogStats().feed_all(LOG)
    assert stats.prefill_batches == 4 and stats.decode_batches == 3
    assert stats.cached_tokens == 0 + 0 + 3840 + 256
    assert stats.new_tokens == 15775 + 15821 + 640 + 23
    assert stats.token_hit_rate == pytest.approx(4096 / (4096 + 32259))
    assert stats.peak_token_usage == 0.99 and stats.peak_mamba_usage == 0.55
    assert stats.max_running_req == 235 and stats.max_queue_req == 895
    assert stats.cache_impl == "UnifiedRadixCache"
    assert stats.failures == ["mamba pool exhausted (raise --max-mamba-cache-size or --mamba-full-memory-ratio)"]
    d = stats.as_dict()
    assert d["log_cached_tokens"] == 4096 and d["peak_mamba_usage"] == 0.55
    assert LogStats().token_hit_rate is None


def test_peaks_are_unknown_until_a_line_reports_them() -> None:
    """A log with no batch line (or lines without the usage fields) knows no peak: None, which the dashboard shows
    blank, never 0.0, which reads as an idle pool."""
    assert LogStats().feed_all(LOG[:2]).as_dict()["peak_token_usage"] is None
    old = LogStats().feed_all([LOG[8]])  # a token usage, no mamba usage: a dense model's line
    assert (old.peak_token_usage, old.peak_mamba_usage) == (0.01, None)
    idle = LogStats().feed_all([LOG[8].replace("token usage: 0.01", "token usage: 0.00")])
    assert idle.peak_token_usage == 0.0  # a reported 0 stays 0


def test_tree_cache_impl_lines() -> None:
    assert parse_tree_cache_impl("Tree cache initialized: source=default impl=MambaRadixCache x=1") == "MambaRadixCache"
    assert parse_tree_cache_impl("[x TP0] Init Unified Radix Cache. Components: (FULL, MAMBA)") == "UnifiedRadixCache"
    assert parse_tree_cache_impl("Prefill batch. #new-seq: 1") is None


def test_the_startup_log_names_the_cache_implementation_for_provenance(tmp_path: Path) -> None:
    assert startup_cache_impl(FIXTURES / "sglang_server.log") == "UnifiedRadixCache"
    quiet = tmp_path / "vllm.log"
    quiet.write_text("INFO 11-24 api_server.py: Starting vLLM API server\n")
    assert startup_cache_impl(quiet) is None and startup_cache_impl(tmp_path / "missing.log") is None


def test_prometheus_sums_label_sets_and_skips_buckets_and_created() -> None:
    m = parse_prometheus(SGLANG_PROM)
    assert m["sglang:cached_tokens_total"] == 20480.0 + 4096.0
    assert m["sglang:prompt_tokens_total"] == 40960.0
    assert m["sglang:time_to_first_token_seconds_sum"] == 2.75
    assert m["sglang:time_to_first_token_seconds_count"] == 10.0
    assert m["sglang:num_requests_total"] == 10.0  # odd label value, timestamp ignored
    assert m["sglang:cache_hit_rate"] == 0.857
    assert not any(k.endswith(("_bucket", "_created")) for k in m)


def test_prometheus_samples_keep_labels() -> None:
    samples = parse_prometheus_samples(SGLANG_PROM)
    by_source = {s.labels.get("cache_source"): s.value for s in samples if s.name == "sglang:cached_tokens_total"}
    assert by_source == {"device": 20480.0, "host": 4096.0}
    odd = next(s for s in samples if s.name == "sglang:num_requests_total")
    assert odd.labels["model_name"] == 'odd "name", {x} y'


def test_vllm_metrics_summary_quantiles_and_nan() -> None:
    m = parse_prometheus(VLLM_PROM)
    assert m["vllm:prefix_cache_hits_total"] == 1984.0 and m["vllm:prefix_cache_queries_total"] == 3200.0
    assert m["vllm:request_prefill_time_seconds_sum"] == 0.4
    assert "vllm:request_prefill_time_seconds" not in m  # quantile samples are skipped
    assert "vllm:gpu_stub_value" not in m  # NaN
    assert m["vllm:cache_config_info"] == 1.0


def test_cache_counters() -> None:
    sg = cache_counters(parse_prometheus(SGLANG_PROM))
    assert sg == CacheCounters(24576.0, 40960.0)
    assert sg is not None and sg.hit_rate == pytest.approx(0.6)
    vl = cache_counters(parse_prometheus(VLLM_PROM))
    assert vl == (1984.0, 3200.0)
    assert cache_counters({"sglang:prompt_tokens_total": 5.0}) == (0.0, 5.0)  # no hit yet: no labelled sample
    assert cache_counters({"sglang:num_running_reqs": 1.0}) is None
    assert CacheCounters(0.0, 0.0).hit_rate is None
    delta = CacheCounters(30.0, 100.0).since(CacheCounters(10.0, 60.0))
    assert delta == (20.0, 40.0) and delta.hit_rate == 0.5


def test_prometheus_edge_cases() -> None:
    text = 'a 1\na{x="1"} 2\nb +Inf\nc{y="\\\\n"} 3 # {trace_id="t"} 1.0\nnot a sample line\n\n'
    m = parse_prometheus(text)
    assert m["a"] == 3.0 and math.isinf(m["b"]) and m["c"] == 3.0
    assert "not" not in m
