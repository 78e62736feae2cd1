"""Request-level caching: when a request's KV and states enter the tree, per strategy.

This is SGLang's ``match_prefix(cow_mamba=True)`` → prefill chunks → ``cache_unfinished_req`` →
decode → ``cache_finished_req`` (https://github.com/sgl-project/sglang), for one request at a time. The
scheduler (batching, retraction) lives above it; this module only moves tokens and slots.

The strategies, one class each, selected by name from ``STRATEGIES``:

* ``no_buffer``: a state at every prefill-chunk end (a copy of the live state) and at the end of the
  committed sequence at finish (the live slot is donated). No branch points, page size 1.
* ``extra_buffer``: states only at chunk-aligned positions (chunk = max(64, page size)) — the last
  aligned point of each prefill forward, or the *branch point* the match reported if it falls in
  that forward — and every ``track_interval`` tokens during decode. At finish only the last tracked
  position is cached. A request holds ping-pong track slots (2 with overlap, 1 without; 0.5.9: always 2).

* ``tokenspeed``: TokenSpeed's variant of ``extra_buffer``: the last page-aligned point of each prefill
  forward (never the branch point instead), nothing during decode, one checkpoint slot per request; its pools
  under pressure as TokenSpeed's scheduler keeps them (``lifecycle.tokenspeed_pool``, ``lifecycle.tokenspeed_walk``).

Committed KV at finish is ``input + output - 1`` tokens (SGLang's ``kv_committed_len``).
"""

from reference_impl.lifecycle.registry import STRATEGIES, make_strategy
from reference_impl.lifecycle.request import (
    STATES_PER_REQUEST_WITH_CACHE,
    CachedRequest,
    LifecycleCounters,
    fingerprint,
)
from reference_impl.lifecycle.strategies import (
    DisabledStrategy,
    ExtraBufferLazyStrategy,
    ExtraBufferStrategy,
    NoBufferStrategy,
)
from reference_impl.lifecycle.strategy import Strategy
from reference_impl.lifecycle.tokenspeed import TokenSpeedStrategy

__all__ = [
    "STATES_PER_REQUEST_WITH_CACHE", "STRATEGIES", "CachedRequest", "DisabledStrategy", "ExtraBufferLazyStrategy",
    "ExtraBufferStrategy",
    "LifecycleCounters", "NoBufferStrategy", "Strategy", "TokenSpeedStrategy", "fingerprint",
    "make_strategy",
]
