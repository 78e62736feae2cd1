"""What a server says about itself: SGLang's "Prefill batch" / "Decode batch" log lines and Prometheus ``/metrics``.

Sources: https://github.com/sgl-project/sglang (log line fields, produced by ``metrics_reporter.py`` +
``pool_stats_observer.py``; metric names; "usage" excludes evictable cached tokens and states, so it measures
what running requests pin, not how full the cache is; use ``#cached-token`` and the
``cached_tokens_total``/``prompt_tokens_total`` counters for hits, never the per-batch ``cache_hit_rate`` gauge;
the "Tree cache initialized ... impl=" line; crash signatures);
SGLang PR #11214's log excerpt (real lines from a 2025-10 build, ``[2025-10-05 18:37:30 TP0 EP0] Decode batch. ...``);
docs/engines/vllm.md and vLLM's source (vLLM's
``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``, both in tokens).
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from hybridbench.engines.server_auth import NO_AUTH, ServerAuth
from hybridbench.records.server_log import LogSample, parse_sglang_log_line

# The batch-line parser lives in hybridbench.records.server_log (results read saved logs with it too).
__all__ = [
    "KNOWN_FAILURES",
    "CacheCounters",
    "LogSample",
    "LogStats",
    "PromSample",
    "cache_counters",
    "parse_prometheus",
    "parse_prometheus_samples",
    "parse_sglang_log_line",
    "parse_tree_cache_impl",
    "scrape_counters",
    "scrape_metrics",
    "startup_cache_impl",
    "vllm_served_block",
    "vllm_state_block",
]

# ----------------------------------------------------------------------------------------------------------------
# SGLang log lines: the cache a server built, failure signatures, a trial's totals and peaks

_TREE_IMPL = re.compile(r"Tree cache initialized:.*?\bimpl=(\w+)")
_UNIFIED_INIT = re.compile(r"Init Unified Radix Cache")


def startup_cache_impl(log_path: Path) -> str | None:
    """The cache implementation a server's startup log names (SGLang: "Tree cache initialized: ... impl=X"),
    or None when the log has no such line (older builds, vLLM, the reference server)."""
    try:
        with log_path.open("rb") as fh:
            for raw in fh:
                if (impl := parse_tree_cache_impl(raw.decode("utf-8", "replace"))) is not None:
                    return impl
    except OSError:
        return None
    return None


def parse_tree_cache_impl(line: str) -> str | None:
    """The cache class a server constructed (SGLang's source), e.g. ``UnifiedRadixCache``; else None."""
    m = _TREE_IMPL.search(line)
    if m:
        return m.group(1)
    return "UnifiedRadixCache" if _UNIFIED_INIT.search(line) else None


# Crash and hang signatures worth naming in an EngineError (SGLang's pool sizing and crash messages).
KNOWN_FAILURES: dict[str, str] = {
    "Not enough space for mamba cache": "mamba pool exhausted (raise --max-mamba-cache-size or "
                                        "--mamba-full-memory-ratio)",
    "Not enough space for mamba ping pong idx": "mamba ping-pong slots exhausted",
    "Can not alloc mamba cache": "mamba slot allocation failed with every state locked (#36770/#34975)",
    "Mamba Radix tree sanity check failed": "idle sanity check failed (#12007)",
    "evict leaf node invalid": "mamba eviction picked a locked leaf (#21379)",
}


@dataclass(slots=True)
class LogStats:
    """Accumulates a server log: peaks, totals and the first failure signatures.

    Totals of ``#cached-token`` and ``#new-token`` come from prefill lines only; their ratio is the log's token
    hit rate (SGLang's source). With DP attention each rank logs its own batches and the totals add up across
    ranks; with plain TP only rank 0 logs.
    """

    prefill_batches: int = 0
    decode_batches: int = 0
    cached_tokens: int = 0
    new_tokens: int = 0
    # None until a batch line reports the usage: a log without them (thinned, filtered, another engine's format, a
    # dense model's lines without "mamba usage") says nothing about the peak, which is not 0.
    peak_token_usage: float | None = None
    peak_mamba_usage: float | None = None
    max_running_req: int = 0
    max_queue_req: int = 0
    cache_impl: str | None = None
    failures: list[str] = field(default_factory=list)

    def add(self, sample: LogSample) -> None:
        if sample.kind == "prefill":
            self.prefill_batches += 1
            self.cached_tokens += sample.cached_token or 0
            self.new_tokens += sample.new_token or 0
        else:
            self.decode_batches += 1
        if sample.token_usage is not None:
            self.peak_token_usage = max(self.peak_token_usage or 0.0, sample.token_usage)
        if sample.mamba_usage is not None:
            self.peak_mamba_usage = max(self.peak_mamba_usage or 0.0, sample.mamba_usage)
        if sample.running_req is not None:
            self.max_running_req = max(self.max_running_req, sample.running_req)
        if sample.queue_req is not None:
            self.max_queue_req = max(self.max_queue_req, sample.queue_req)

    def feed(self, line: str) -> LogSample | None:
        """Take one raw log line: batch lines update the stats, and so do the cache-impl and failure lines."""
        sample = parse_sglang_log_line(line)
        if sample is not None:
            self.add(sample)
            return sample
        if self.cache_impl is None:
            self.cache_impl = parse_tree_cache_impl(line)
        for needle, meaning in KNOWN_FAILURES.items():
            if needle in line and meaning not in self.failures:
                self.failures.append(meaning)
        return None

    def feed_all(self, lines: Iterable[str]) -> LogStats:
        for line in lines:
            self.feed(line)
        return self

    @property
    def token_hit_rate(self) -> float | None:
        total = self.cached_tokens + self.new_tokens
        return self.cached_tokens / total if total else None

    def as_dict(self) -> dict[str, float | int | str | list[str] | None]:
        return {
            "prefill_batches": self.prefill_batches,
            "decode_batches": self.decode_batches,
            "log_cached_tokens": self.cached_tokens,
            "log_new_tokens": self.new_tokens,
            "log_token_hit_rate": self.token_hit_rate,
            "peak_token_usage": self.peak_token_usage,
            "peak_mamba_usage": self.peak_mamba_usage,
            "max_running_req": self.max_running_req,
            "max_queue_req": self.max_queue_req,
            "cache_impl": self.cache_impl,
            "failures": list(self.failures),
        }


# ----------------------------------------------------------------------------------------------------------------
# Prometheus text format


class PromSample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(text: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], text)


def _parse_sample(line: str) -> PromSample | None:
    m = _NAME.match(line)
    if m is None:
        return None
    name, rest = m.group(0), line[m.end():]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        pos = 1
        while True:
            lm = _LABEL.match(rest, pos)
            if lm is None:
                break
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
        close = rest.find("}", pos)
        if close < 0:
            return None
        rest = rest[close + 1:]
    parts = rest.split("#", 1)[0].split()  # drop an OpenMetrics exemplar; then value [timestamp]
    if not parts:
        return None
    try:
        value = float(parts[0])  # accepts NaN, +Inf, -Inf
    except ValueError:
        return None
    return PromSample(name, labels, value)


def parse_prometheus_samples(text: str) -> list[PromSample]:
    """Every sample line of a Prometheus/OpenMetrics text exposition, labels unescaped; comments skipped."""
    out: list[PromSample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sample = _parse_sample(line)
        if sample is not None:
            out.append(sample)
    return out


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over its label sets.

    Histogram ``_sum`` and ``_count`` are kept (summed like counters); ``_bucket`` samples and summary
    quantiles (any sample with an ``le`` or ``quantile`` label) are skipped, since adding them up means nothing.
    ``<family>_created`` timestamps that prometheus_client adds for counters/histograms/summaries are skipped
    when the family's ``# TYPE`` line is present. NaN samples are skipped.
    """
    typed: dict[str, str] = {}
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) >= 4 and parts[0] == "#" and parts[1] == "TYPE":
            typed[parts[2]] = parts[3]
    out: dict[str, float] = {}
    for s in parse_prometheus_samples(text):
        if "le" in s.labels or "quantile" in s.labels or math.isnan(s.value):
            continue
        if s.name.endswith("_created") and typed.get(s.name[: -len("_created")]) in ("counter", "histogram",
                                                                                      "summary"):
            continue
        out[s.name] = out.get(s.name, 0.0) + s.value
    return out


class CacheCounters(NamedTuple):
    """Cumulative prompt tokens served from cache and prompt tokens in total, as the server counts them."""

    cached_tokens: float
    prompt_tokens: float

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens > 0 else None

    @property
    def known(self) -> bool:
        """False for a difference that went negative: the counters went backwards (a restart, a misread scrape)."""
        return self.cached_tokens >= 0 and self.prompt_tokens >= 0

    def since(self, before: CacheCounters) -> CacheCounters:
        """The counts between two scrapes (counters only grow; a negative difference is not ``known``)."""
        return CacheCounters(self.cached_tokens - before.cached_tokens, self.prompt_tokens - before.prompt_tokens)


# (cached, total) pairs, first present wins.
_COUNTER_PAIRS: tuple[tuple[str, str], ...] = (
    ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),  # SGLang's metrics_reporter.py (cache_source summed)
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),  # docs/engines/vllm.md
)


def cache_counters(metrics: Mapping[str, float]) -> CacheCounters | None:
    """Cached and total prompt tokens from parsed ``/metrics``; None when the server exposes neither pair.

    SGLang: ``sglang:cached_tokens_total`` (summed over ``cache_source`` = device, host, storage) and
    ``sglang:prompt_tokens_total``. vLLM: ``vllm:prefix_cache_hits_total`` and
    ``vllm:prefix_cache_queries_total`` (both in tokens; queries include the server's own warm-up).
    A missing cached counter with a present total counts as 0 cached: a labelled counter has no sample until
    its first increment.
    """
    for cached, total in _COUNTER_PAIRS:
        if total in metrics:
            return CacheCounters(metrics.get(cached, 0.0), metrics[total])
    return None


def vllm_state_block(text: str) -> int | None:
    """The tokens per block at whose ends vLLM keeps Mamba states: ``vllm:cache_config_info``'s ``block_size`` label
    (the API server syncs it from the worker, which enlarges a hybrid model's block until an attention page holds a
    Mamba state: vllm/v1/engine/core_client.py); None when absent. Not ``mamba_block_size``: vLLM 0.32.0 reports 16
    there (its replay-SSM buffer) while align mode hits whole 256-token blocks (tests/vllm_cpu)."""
    for sample in parse_prometheus_samples(text):
        if sample.name == "vllm:cache_config_info":
            value = sample.labels.get("block_size", "")
            if value.isascii() and value.isdigit() and int(value) > 0:
                return int(value)
    return None


def vllm_served_block(base_url: str, auth: ServerAuth = NO_AUTH) -> int | None:
    """:func:`vllm_state_block` of a running vLLM server's /metrics (None when it does not answer or name one)."""
    text = scrape_metrics(base_url, auth=auth)
    return vllm_state_block(text) if text is not None else None


def scrape_metrics(base_url: str, timeout: float = 10.0, auth: ServerAuth = NO_AUTH) -> str | None:
    """The server's /metrics text now, or None when it does not answer (metrics off, or the server gone)."""
    try:
        with urllib.request.urlopen(auth.request(base_url, "/metrics"), timeout=timeout) as resp:
            return str(resp.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def scrape_counters(base_url: str, auth: ServerAuth = NO_AUTH) -> CacheCounters | None:
    """The cache counters of the server's /metrics now, or None when it does not answer."""
    text = scrape_metrics(base_url, auth=auth)
    return cache_counters(parse_prometheus(text)) if text is not None else None
