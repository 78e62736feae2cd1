"""What a trial evicted, from the server's own counters: a policy comparison means something only if it did.

Sources: ``sglang:evicted_tokens_total`` on ``/metrics`` (SGLang's counter of KV tokens evicted from the
device, SGLang's metrics_reporter.py; the reference server keeps the same name) and, on the reference server only,
``internal_states[0].evicted_mamba_states`` on ``/server_info`` (SGLang exposes no evicted-state counter),
and there too ``host_load_back_tokens``: KV tokens hits loaded back from the host tier, the hits that
outlived a device eviction.
Both are lifetime counters: a trial's evictions are the difference of a scrape after it and one before.
A source the server does not have stays None: unknown, never zero.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from hybridbench.engines.server_logs import parse_prometheus

__all__ = ["Evictions", "read_evictions"]


@dataclass(frozen=True, slots=True)
class Evictions:
    tokens: float | None  # KV tokens evicted from the device
    states: float | None  # recurrent-state checkpoints evicted (or tombstoned) on the device
    host_loaded: float | None = None  # KV tokens loaded back from the host tier by hits

    def since(self, before: Evictions) -> Evictions:
        def delta(after: float | None, prior: float | None) -> float | None:
            return None if after is None or prior is None else max(0.0, after - prior)

        return Evictions(delta(self.tokens, before.tokens), delta(self.states, before.states),
                         delta(self.host_loaded, before.host_loaded))

    def snapshot(self) -> dict[str, Any]:
        return {"evicted_tokens": self.tokens, "evicted_states": self.states, "host_loaded_tokens": self.host_loaded}


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            data: bytes = resp.read()
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None


def read_evictions(base_url: str) -> Evictions:
    tokens: float | None = None
    text = _get(base_url + "/metrics")
    if text is not None:
        tokens = parse_prometheus(text.decode("utf-8", "replace")).get("sglang:evicted_tokens_total")
    internal: dict[str, Any] = {}
    raw = _get(base_url + "/server_info")
    if raw is not None:
        try:
            first = (json.loads(raw).get("internal_states") or [{}])[0]
            internal = first if isinstance(first, dict) else {}
        except (ValueError, AttributeError, IndexError, TypeError):
            internal = {}

    def number(key: str) -> float | None:
        value = internal.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return Evictions(tokens, number("evicted_mamba_states"), number("host_load_back_tokens"))
