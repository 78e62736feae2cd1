"""What a trial evicted, from the server's own counters: a policy comparison means something only if it did.

Sources, on ``/metrics``: ``sglang:evicted_tokens_total`` (KV tokens evicted from the device) and
``sglang:load_back_tokens_total`` (KV tokens loaded back from the host tier by hits: the hits that outlived a
device eviction), the two counters of SGLang's radix-cache collector (both added by
https://github.com/sgl-project/sglang/pull/10225; 0.5.23 observability/metrics_collector.py:2535 and :2553,
0.5.16 :1930 and :1943, 0.5.9 metrics/collector.py:1581 and :1594), on every TP rank's cache when
``--enable-metrics`` is on. The reference server keeps the first name, and has on ``/server_info``
``internal_states[0].evicted_mamba_states`` (SGLang exposes no evicted-state counter) and ``host_load_back_tokens``,
read instead of ``/metrics`` where present: one source per server, never both added up.
All are lifetime counters: a trial's counts are the difference of a scrape after it and one before; a counter
lower after than before (a restart mid-trial, a misread scrape) leaves the trial's count unknown (None).
A source the server does not have stays None: unknown, never zero.

SGLang's two counters are read from one TP rank: every rank counts the same tokens (0.5.23's own help text:
"Every TP rank reports the same logical count under its own rank labels; read one rank rather than summing
ranks"). 0.5.23 labels them ``tp_rank`` / ``pp_rank`` (:2416-2432), and the load-back per host pool
(``kv``, ``mamba``, ...: only ``kv`` is KV tokens); 0.5.9 and 0.5.16 do not, so prometheus_client's multiprocess
registry adds the ranks into one series (TP x the count; with ``--enable-dp-attention``, TP / DP x each DP
group's count, the groups counting their own requests), which is divided by ``metrics_ranks``.
They are labelled, and prometheus_client exports a labelled counter only from its first increment: a fresh
server's scrape lacks both. A counter a later scrape has was therefore 0 where an answered scrape lacked it; a
load-back counter absent from both scrapes is 0 when the after-scrape has the evicted-token counter of the same
collector, and unknown otherwise (metrics off, a release without it, or nothing evicted at all).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from hybridbench.engines.server_auth import NO_AUTH, ServerAuth
from hybridbench.engines.server_logs import PromSample, parse_prometheus_samples

__all__ = ["EVICTED_TOKENS", "LOAD_BACK_TOKENS", "Evictions", "one_rank", "read_evictions"]

EVICTED_TOKENS = "sglang:evicted_tokens_total"
LOAD_BACK_TOKENS = "sglang:load_back_tokens_total"
_RANKS = ("tp_rank", "pp_rank")


@dataclass(frozen=True, slots=True)
class Evictions:
    tokens: float | None  # KV tokens evicted from the device
    states: float | None  # recurrent-state checkpoints evicted (or tombstoned) on the device
    host_loaded: float | None = None  # KV tokens loaded back from the host tier by hits
    # "tokens" / "host_loaded": their counter was missing from a /metrics scrape that answered (see above)
    absent: frozenset[str] = frozenset()
    host_source: str = ""  # where host_loaded comes from: "server_info", "metrics", or "" (nowhere)

    def since(self, before: Evictions) -> Evictions:
        def delta(after: float | None, prior: float | None, prior_absent: bool) -> float | None:
            if after is None:
                return None
            if prior is None:
                return after if prior_absent else None  # born during the trial: it counted from 0
            # Lower than before: the server restarted mid-trial or a scrape misread; the trial's count is unknown
            # (clamped to 0 it read as "nothing evicted", and a negative one as evidence of eviction).
            return after - prior if after >= prior else None

        host = None
        if self.host_source == before.host_source:  # both scrapes from one source, or no count
            host = delta(self.host_loaded, before.host_loaded, "host_loaded" in before.absent)
            if host is None and self.host_source == "metrics" and "host_loaded" in self.absent & before.absent \
                    and self.tokens is not None:
                host = 0.0  # its collector counted evictions and never a load-back
        return Evictions(delta(self.tokens, before.tokens, "tokens" in before.absent),
                         delta(self.states, before.states, False), host)

    def snapshot(self) -> dict[str, Any]:
        return {"evicted_tokens": self.tokens, "evicted_states": self.states, "host_loaded_tokens": self.host_loaded}


def _rank(sample: PromSample) -> tuple[int, ...]:
    return tuple(int(v) if (v := sample.labels.get(k, "0")).isdigit() else 0 for k in _RANKS)


def one_rank(samples: list[PromSample], name: str, metrics_ranks: int = 1) -> float | None:
    """One TP rank's count of ``name`` (its ``kv`` pool where it has pools); None when no sample has it.

    Rank-labelled series: the lowest rank's, summed over the rest (data-parallel groups count their own requests).
    Unlabelled: the series' sum over ``metrics_ranks``, the processes that added into it.
    """
    mine = [s for s in samples if s.name == name and s.labels.get("pool", "kv") == "kv" and not math.isnan(s.value)]
    if not mine:
        return None
    if any(k in s.labels for s in mine for k in _RANKS):
        first = min(_rank(s) for s in mine)
        return sum(s.value for s in mine if _rank(s) == first)
    return sum(s.value for s in mine) / max(1, metrics_ranks)


def _get(base_url: str, path: str, auth: ServerAuth) -> bytes | None:
    try:
        with urllib.request.urlopen(auth.request(base_url, path), timeout=10) as resp:
            data: bytes = resp.read()
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None


def read_evictions(base_url: str, metrics_ranks: int = 1, auth: ServerAuth = NO_AUTH) -> Evictions:
    """The server's counters now. ``metrics_ranks``: how many processes add the same count into one unlabelled
    SGLang series (TP / DP attention groups: sglang_cmd.sglang_metrics_ranks; 1 for a single-process server)."""
    text = _get(base_url, "/metrics", auth)
    samples = parse_prometheus_samples(text.decode("utf-8", "replace")) if text is not None else None
    internal: dict[str, Any] = {}
    raw = _get(base_url, "/server_info", auth)  # SGLang guards it with --api-key
    if raw is not None:
        try:
            first = (json.loads(raw).get("internal_states") or [{}])[0]
            internal = first if isinstance(first, dict) else {}
        except (ValueError, AttributeError, IndexError, TypeError):
            internal = {}

    def number(key: str) -> float | None:
        value = internal.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    absent: set[str] = set()
    tokens = None
    if samples is not None:
        tokens = one_rank(samples, EVICTED_TOKENS, metrics_ranks)
        if tokens is None:
            absent.add("tokens")
    host, source = number("host_load_back_tokens"), "server_info"
    if host is None:
        source = "metrics" if samples is not None else ""
        if samples is not None:
            host = one_rank(samples, LOAD_BACK_TOKENS, metrics_ranks)
            if host is None:
                absent.add("host_loaded")
    return Evictions(tokens, number("evicted_mamba_states"), host, frozenset(absent), source)
