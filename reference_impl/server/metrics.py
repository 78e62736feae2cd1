"""Server counters, SGLang's Prometheus metric names, and SGLang-style scheduler log lines."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from reference_impl.engine.core import EngineCore

__all__ = ["Histogram", "Metrics", "pool_usage"]

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                15.0, 20.0, 25.0, 30.0, 60.0, 120.0)
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def render(self, name: str, help_text: str, label: str) -> list[str]:
        """Prometheus lines; ``label`` (``model_name="..."``) goes on every sample, as SGLang's do."""
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        counts = self.counts or [0] * (len(self.buckets) + 1)
        acc = 0
        for bound, c in zip(self.buckets, counts, strict=False):
            acc += c
            lines.append(f'{name}_bucket{{le="{bound}",{label}}} {acc}')
        lines += [f'{name}_bucket{{le="+Inf",{label}}} {self.n}', f"{name}_sum{{{label}}} {self.total}",
                  f"{name}_count{{{label}}} {self.n}"]
        return lines


def _label_value(text: str) -> str:
    """Escape a Prometheus label value (backslash, double quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def pool_usage(core: EngineCore) -> tuple[float, float, int, int]:
    """(full token usage, mamba usage, KV tokens in use, states in use), SGLang's way: evictable is free."""
    tree = core.tree
    kv_used = tree.kv_pool.size - tree.kv_pool.available - tree.kv_evictable
    st_used = tree.state_pool.size - tree.state_pool.available - tree.state_evictable
    return kv_used / tree.kv_pool.size, st_used / tree.state_pool.size, kv_used, st_used


class Metrics:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_tokens = 0
        self.num_requests = 0
        self.num_aborted = 0
        self.dropped_streams = 0  # streams whose client stopped reading (reference_impl/server/stream.py)
        self.running = 0
        self.queued = 0
        self.token_usage = 0.0
        self.full_token_usage = 0.0
        self.mamba_usage = 0.0
        self.cache_hit_rate = 0.0
        self.gen_throughput = 0.0
        self.kv_used = 0
        self.mamba_used = 0
        self.max_total_num_tokens = 0
        self.evicted_states = 0
        # Highest usage seen after any step: shows a load really filled the pools (the gauges are instantaneous).
        self.peak_full_token_usage = 0.0
        self.peak_mamba_usage = 0.0
        self.evicted_tokens = 0
        # Lifetime counters, as SGLang's: a flush builds a new tree, whose own counters start again at zero.
        self._tree: object = None
        self._evicted_before = (0, 0, 0)  # (tokens, states evicted, host tokens loaded) by earlier trees
        self.host_loaded_tokens = 0  # KV tokens a hit loaded back from the host tier: hits that outlived eviction
        self.retractions = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.itl = Histogram(LATENCY_BUCKETS)

    def snapshot(self, core: EngineCore) -> None:
        full, mamba, kv_used, st_used = pool_usage(core)
        with self.lock:
            self.running = len(core.running) + (1 if core.chunked else 0)
            self.queued = len(core.waiting)
            self.full_token_usage, self.mamba_usage = full, mamba
            self.peak_full_token_usage = max(self.peak_full_token_usage, full)
            self.peak_mamba_usage = max(self.peak_mamba_usage, mamba)
            self.token_usage = max(full, mamba)
            self.kv_used, self.mamba_used = kv_used, st_used
            self.max_total_num_tokens = core.tree.kv_pool.size
            if core.tree is not self._tree:
                self._evicted_before = (self.evicted_tokens, self.evicted_states, self.host_loaded_tokens)
                self._tree = core.tree
            self.evicted_tokens = self._evicted_before[0] + core.tree.tokens_evicted_total
            self.evicted_states = self._evicted_before[1] + core.tree.states_evicted_total
            loaded = core.host.counters.load_back_tokens if core.host is not None else 0
            self.host_loaded_tokens = self._evicted_before[2] + loaded
            self.retractions = core.counters.retractions

    def render(self, model_name: str) -> str:
        label = f'model_name="{_label_value(model_name)}"'
        with self.lock:
            gauges = {
                "num_running_reqs": self.running, "num_queue_reqs": self.queued, "token_usage": self.token_usage,
                "full_token_usage": self.full_token_usage, "mamba_usage": self.mamba_usage,
                "cache_hit_rate": self.cache_hit_rate, "gen_throughput": self.gen_throughput,
                "kv_used_tokens": self.kv_used, "mamba_used_tokens": self.mamba_used,
                "max_total_num_tokens": self.max_total_num_tokens,
            }
            counters = {
                "prompt_tokens_total": self.prompt_tokens, "generation_tokens_total": self.generation_tokens,
                "num_requests_total": self.num_requests, "num_aborted_requests_total": self.num_aborted,
                "evicted_tokens_total": self.evicted_tokens, "num_retracted_requests_total": self.retractions,
                "num_dropped_streams_total": self.dropped_streams,
            }
            lines: list[str] = []
            for name, value in gauges.items():
                lines += [f"# TYPE sglang:{name} gauge", f"sglang:{name}{{{label}}} {value}"]
            for name, value in counters.items():
                lines += [f"# TYPE sglang:{name} counter", f"sglang:{name}{{{label}}} {value}"]
            lines += ["# TYPE sglang:cached_tokens_total counter",
                      f'sglang:cached_tokens_total{{{label},cache_source="device"}} {self.cached_tokens}']
            lines += self.ttft.render("sglang:time_to_first_token_seconds", "Time to first token in seconds.", label)
            lines += self.itl.render("sglang:inter_token_latency_seconds", "Inter-token latency in seconds.", label)
            lines += self.e2e.render("sglang:e2e_request_latency_seconds", "End-to-end request latency in seconds.",
                                     label)
        return "\n".join(lines) + "\n"
