"""Decode steps in a run: k steps of an unchanged batch applied at once, for the simulator.

Between events (an arrival, a prefill, a finish, a retraction) every decode step does the same to each running
request: one KV slot, one committed token, a fingerprint of its live state. On the seglen SWE-bench preset that
per-token work was most of ``python -m reference_impl.simulate``'s time (855K decode tokens in 17.7K steps). A run
of k steps does it once per request (``Strategy.decode`` with k tokens: k KV slots, one fingerprint) and leaves
exactly the state k single steps leave; the simulator still times and records every step of it.

A run stops short of anything that would make one of its steps differ from a single step:

* a finish: a run ends with the first step that finishes a request (its finish inserts into the tree, and the
  simulator hands the client its slot and the session's next turn);
* the KV pool running low: no step of a run may evict or retract;
* a second state track of one request: extra_buffer tracks every ``track_interval`` committed tokens, so a run is
  at most that long (``copies`` charges each track to the step that made it, as a single step would);
* a waiting or chunked request (a prefill may be scheduled) or an event the simulator knows of (it ends a run
  before the first step that starts at or after the next send or arrival);
* a strategy whose decode is not the shared one (TokenSpeed's pages): it never runs in bulk.

``tests/reference_impl/engine/test_decode_run.py`` compares every record, step and counter of both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference_impl.engine.core import EngineCore, EngineRequest
from reference_impl.lifecycle import ExtraBufferStrategy, Strategy

__all__ = ["DecodeRun", "apply_run", "plan_run"]

# The decode a run repeats: any other override (TokenSpeed's page holds) makes each step its own.
_SHARED = (Strategy.decode, Strategy.reserve_decode_kv, Strategy.decode_kv_need)


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """Up to ``max_steps`` decode steps of ``requests``, as they stand now."""

    requests: tuple[EngineRequest, ...]
    max_steps: int
    context_tokens: int  # the first step's attention context, summed: each request's KV plus the token it feeds
    track_steps: dict[int, int]  # step (1-based) -> state tracks it makes (extra_buffer's decode tracking)

    def context_at(self, step: int) -> int:
        """Attention context of the ``step``-th step (1-based): each request's KV grows by one a step."""
        return self.context_tokens + len(self.requests) * (step - 1)

    def copies(self, step: int) -> int:
        """Whole-state copies the ``step``-th step makes (one per track), charged to it as a single step is."""
        return self.track_steps.get(step, 0)


def _runs_in_bulk(strategy: Strategy) -> bool:
    """Whether the strategy's decode is the shared one, with no tracking or extra_buffer's."""
    cls = type(strategy)
    return (cls.decode, cls.reserve_decode_kv, cls.decode_kv_need) == _SHARED and \
        cls._on_decode in (Strategy._on_decode, ExtraBufferStrategy._on_decode)


def _track_interval(strategy: Strategy) -> int:
    """The committed-token interval a strategy tracks decode states at; 0 if it tracks none."""
    tracks = type(strategy)._on_decode is ExtraBufferStrategy._on_decode
    return max(1, strategy.track_interval) if tracks else 0


def plan_run(core: EngineCore) -> DecodeRun | None:
    """The run the core's next steps may take in bulk, or None when the next step must run singly."""
    running = core.running
    if not running or core.waiting or core.chunked is not None:
        return None
    if not _runs_in_bulk(core.strategy):
        return None
    interval = _track_interval(core.strategy)
    n = len(running)
    steps = min(r.remaining for r in running)  # up to the first step that finishes a request
    steps = min(steps, core.tree.kv_pool.available // n)  # k slots each, without evicting or retracting
    if interval:
        steps = min(steps, interval)  # at most one track per request: a single step tracks each crossing
    if steps < 1:
        return None
    context = 0
    tracks: dict[int, int] = {}
    for req in running:
        cached = req.cached
        # Between steps a decoding request has KV for all but its last sampled token and nothing reserved.
        if cached is None or cached.kv_reserved or cached.kv_len < cached.input_len \
                or len(cached.tokens) != cached.kv_len + 1:
            return None
        context += cached.kv_len + 1
        if interval:
            step = interval - cached.kv_len % interval  # the step whose commit reaches a multiple of the interval
            if step <= steps:
                tracks[step] = tracks.get(step, 0) + 1
    return DecodeRun(tuple(running), steps, context, tracks)


def apply_run(core: EngineCore, run: DecodeRun, steps: int,
              sample: Callable[[EngineRequest, int], Sequence[int]]) -> list[EngineRequest]:
    """Apply ``steps`` (<= ``run.max_steps``) steps; return the requests the last one finished, in batch order.

    ``sample(req, k)``: the next ``k`` tokens ``req`` samples."""
    if not 1 <= steps <= run.max_steps:
        raise ValueError(f"a run of {run.max_steps} steps cannot take {steps}")
    strategy, cfg = core.strategy, core.config
    for req in run.requests:
        cached = req.cached
        assert cached is not None
        tokens = sample(req, steps)
        # What ``steps`` single steps do: reserve a slot, then commit the previous token, each step.
        strategy.decode(cached, tokens)
        req.output.extend(tokens)
    core.track_peaks()  # a run only adds KV until its last step finishes requests: the peak is before that
    # A single step finishes its requests in batch order, each after its own commit; another request's commit
    # touches only that request's KV count and slots, so finishing them after every commit is the same.
    finished = core.finish_done(run.requests)
    core.counters.decode_steps += steps
    ratio = core.new_token_ratio
    for _ in range(steps):  # the same float operations as the single steps make, so the ratio is bit-equal
        ratio = max(cfg.min_new_token_ratio, ratio - cfg.new_token_ratio_decay)
    core.new_token_ratio = ratio
    return finished
