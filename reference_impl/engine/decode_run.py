"""Decode steps in a run: the steps between two prefills applied at once, for the simulator.

Between prefills every decode step does the same to each running request: one KV slot, one committed token, a
fingerprint of its live state. On the seglen SWE-bench preset that per-token work was most of ``python -m
reference_impl.simulate``'s time (855K decode tokens in 17.7K steps). A run commits each request's tokens once
(``Strategy.decode`` with all of them: their KV slots, one fingerprint) when it finishes or when the run ends, and
leaves exactly the state its single steps leave; the simulator still times and records every step.

Why deferring is exact: a request's decode touches only its own KV count and its own slots, and a finish (in
batch order, at its step, after its own commit) only inserts into the tree and frees: neither allocates, so
neither depends on the others' deferred slots. What would make a step depend on them ends the run before it:

* the KV pool running low: every step's eviction demand must fit without evicting or retracting (``take``);
* a second state track of one request: extra_buffer tracks every ``track_interval`` committed tokens, so a run is
  at most that long; ``step`` charges each track's state copy to the step that made it, as a single step does;
* a waiting or chunked request (a prefill may be scheduled), or an arrival the simulator knows of;
* a strategy other than SGLang's three (TokenSpeed's pages, any new one): it never runs in bulk.

``tests/reference_impl/engine/test_decode_run.py`` compares every record, step, counter and the tree of both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference_impl.engine.core import EngineCore, EngineRequest
from reference_impl.lifecycle import DisabledStrategy, ExtraBufferStrategy, NoBufferStrategy, Strategy

__all__ = ["DecodeRun", "Sampler", "StepShape", "plan_run"]

# The strategies whose decode a run repeats and whose finish only inserts and frees (never allocates, so another
# request's deferred commit cannot change it): a strategy joins only when it is shown to be so, never by default.
# Not extra_buffer_lazy: whether its boundary slot is had depends on the pool at that step (a finish probes it too).
_BULK = (DisabledStrategy, NoBufferStrategy, ExtraBufferStrategy)
Sampler = Callable[[EngineRequest, int], Sequence[int]]  # (request, k) -> the next k tokens it samples


@dataclass(frozen=True, slots=True)
class StepShape:
    """What the cost model needs of one decode step."""

    batch_size: int
    context_tokens: int  # attention context, summed: each request's KV plus the token it feeds
    state_copies: int  # extra_buffer's decode tracks this step makes


def _runs_in_bulk(strategy: Strategy) -> bool:
    """Exactly one of the strategies above, not a subclass (TokenSpeed's pages subclass extra_buffer). Not 0.5.16's
    extra_buffer with overlap: it books a track a step early and reserves the look-ahead's KV for it, which the
    run's per-step track and KV counts do not model."""
    if isinstance(strategy, ExtraBufferStrategy) and strategy.books_ahead():
        return False
    return type(strategy) in _BULK


def _track_interval(strategy: Strategy) -> int:
    """The committed-token interval a strategy tracks decode states at; 0 if it tracks none."""
    if type(strategy)._on_decode is not ExtraBufferStrategy._on_decode:
        return 0
    assert isinstance(strategy, ExtraBufferStrategy)
    return strategy.decode_track_interval()


class DecodeRun:
    """Decode steps of the core's running batch, from now until the simulator stops taking them."""

    def __init__(self, core: EngineCore, interval: int) -> None:
        self.core = core
        self.active = list(core.running)  # batch order
        self.steps = 0  # steps taken
        self.max_steps = interval or (1 << 62)  # at most one track per request a run
        self._committed = {id(r): r.cached.kv_len for r in self.active}  # type: ignore[union-attr]
        self._context = sum(self._committed.values())  # of the active requests, before the run
        # Per step, not per token: which requests a step finishes (batch order) and how many states it tracks.
        self._due: dict[int, list[EngineRequest]] = {}
        self._tracks: dict[int, int] = {}
        for req in self.active:
            last = req.remaining  # the step that samples its last token
            self._due.setdefault(last, []).append(req)
            if interval:
                step = interval - self._committed[id(req)] % interval  # its commit reaches a multiple then
                if step <= last:
                    self._tracks[step] = self._tracks.get(step, 0) + 1

    def steps_possible(self) -> bool:
        """Whether the run's first step can be taken (else the core's next step runs singly: it may retract)."""
        return self.core.tree.kv_pool.available >= self.core.strategy.decode_kv_demand(len(self.active))

    def take(self) -> StepShape | None:
        """Take the next step if it can run as a single step would (its KV fits without evicting); its shape."""
        core, n, step = self.core, len(self.active), self.steps + 1
        if not n or step > self.max_steps:
            return None
        pool = core.tree.kv_pool
        # Each active request holds step - 1 slots not yet allocated; the step reserves one more for each, and a
        # single step evicts first when fewer than its demand (a page each when paged) are free.
        if pool.available - (step - 1) * n < core.strategy.decode_kv_demand(n):
            return None
        self.steps = step
        c = core.counters
        c.peak_kv_used = max(c.peak_kv_used, pool.size - pool.available + step * n)  # the core's, at schedule time
        c.peak_states_used = max(c.peak_states_used, core.tree.state_pool.size - core.tree.state_pool.available)
        return StepShape(n, self._context + n * step, self._tracks.get(step, 0))

    def finish_due(self, sample: Sampler) -> list[EngineRequest]:
        """Commit and finish, in batch order, the requests the step just taken finished."""
        due = self._due.get(self.steps)
        if not due:
            return []
        for req in due:
            self._commit(req, sample)
            self._context -= self._committed[id(req)]
        self.active = [r for r in self.active if r.remaining > 0]
        return self.core.finish_done(due)

    def kv_used(self) -> int:
        """KV in use after the step just taken, as a single step leaves it (deferred slots counted)."""
        pool = self.core.tree.kv_pool
        return pool.size - pool.available + self.steps * len(self.active)

    def close(self, sample: Sampler) -> None:
        """Commit what the still-running requests sampled in the steps taken; the core's step counters."""
        for req in self.active:
            self._commit(req, sample)
        core, cfg = self.core, self.core.config
        core.counters.decode_steps += self.steps
        ratio = core.new_token_ratio
        for _ in range(self.steps):  # the same float operations as the single steps make, so the ratio is bit-equal
            ratio = max(cfg.min_new_token_ratio, ratio - cfg.new_token_ratio_decay)
        core.new_token_ratio = ratio

    def _commit(self, req: EngineRequest, sample: Sampler) -> None:
        cached = req.cached
        assert cached is not None
        tokens = sample(req, self.steps)
        self.core.strategy.decode(cached, tokens)  # what k single steps do: k slots, k commits, tracks, fingerprint
        req.output.extend(tokens)


def plan_run(core: EngineCore) -> DecodeRun | None:
    """A run of the core's next steps, or None when the next step must run singly."""
    running = core.running
    if not running or core.waiting or core.chunked is not None or not _runs_in_bulk(core.strategy):
        return None
    for req in running:
        cached = req.cached
        # Between steps a decoding request has KV for all but its last sampled token and nothing reserved.
        if cached is None or cached.kv_reserved or cached.kv_len < cached.input_len \
                or len(cached.tokens) != cached.kv_len + 1:
            return None
    return DecodeRun(core, _track_interval(core.strategy))
