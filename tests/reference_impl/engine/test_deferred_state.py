"""A decoding request's live state is labelled lazily (``StatePool.write_prefix``): the content computed when the
slot is read must be what an eager write would have stored then, whatever the slot or the request did since."""

from __future__ import annotations

import pytest
from test_decode_run import CASES, pools, sessions, timer, tree_state

from reference_impl.engine import simulator
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.lifecycle import CachedRequest, fingerprint, make_strategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, Prefixed, StateContent, StatePool
from reference_impl.radix.tree import MambaRadixTree
from workloads.arrival import LoadSpec, arrival_schedule

OTHER = StateContent(5, 12345)


def request(n: int = 600) -> CachedRequest:
    return CachedRequest.of(list(range(n)))


def test_a_deferred_label_names_the_tokens_written_not_the_tokens_now() -> None:
    pool, req = StatePool(4), request()
    slot = pool.alloc()
    assert slot is not None
    pool.write_prefix(slot, req, 300)
    req.tokens.extend(range(1000, 1300))  # decode goes on; the slot still holds the state after 300 tokens
    assert pool.read(slot) == fingerprint(req.tokens, 300)
    assert pool.read(slot) == fingerprint(req.tokens, 300)  # read again: the computed label is kept


def test_the_newest_write_wins_deferred_or_not() -> None:
    pool, req = StatePool(4), request()
    slot = pool.alloc()
    assert slot is not None
    pool.write_prefix(slot, req, 100)
    pool.write_prefix(slot, req, 200)
    assert pool.read(slot) == fingerprint(req.tokens, 200)
    pool.write_prefix(slot, req, 300)
    pool.write(slot, OTHER)  # an eager write over an unread deferred one
    assert pool.read(slot) == OTHER
    pool.write_prefix(slot, req, 400)  # a deferred write over a computed one
    assert pool.read(slot) == fingerprint(req.tokens, 400)
    assert dict(pool.content) == {slot: fingerprint(req.tokens, 400)}


def test_a_freed_slot_forgets_its_deferred_label() -> None:
    pool, req = StatePool(1), request()
    slot = pool.alloc()
    assert slot is not None
    pool.write_prefix(slot, req, 100)
    pool.free(slot)
    assert pool.alloc() == slot  # handed out again, never written since
    assert pool.read(slot) is None and dict(pool.content) == {}


def test_copy_and_the_whole_pool_view_compute_deferred_labels() -> None:
    pool, req = StatePool(4), request()
    a, b, c = pool.alloc(), pool.alloc(), pool.alloc()
    assert a is not None and b is not None and c is not None
    pool.write_prefix(a, req, 100)
    pool.copy(a, b)  # copy-on-write of a deferred state: the copy holds its content
    pool.write_prefix(a, req, 150)
    pool.write_prefix(c, req, 50)
    assert dict(pool.content) == {a: fingerprint(req.tokens, 150), b: fingerprint(req.tokens, 100),
                                  c: fingerprint(req.tokens, 50)}


def test_a_hit_on_a_state_decoded_step_by_step_gets_the_finished_prefix() -> None:
    # no_buffer caches the live state at the finish: its last deferred label is what the next turn copies.
    s = make_strategy("no_buffer", MambaRadixTree(KVPool(1 << 16), StatePool(16), make_policy("lru")))
    turn1 = list(range(1, 301))
    req = s.admit(turn1)
    s.prefill(req, finishes_after_prefill=False)
    outputs = list(range(1000, 1040))
    for token in outputs:  # one decode step each: 40 deferred writes to the same live slot
        s.decode(req, [token])
    s.finish(req)
    check_invariants(s.tree)
    sequence = turn1 + outputs
    hit = s.admit([*sequence, 7, 8])
    committed = len(sequence) - 1  # the last sampled token never got KV
    assert hit.prefix_len == committed and hit.live_state is not None
    assert s.tree.state_pool.read(hit.live_state) == fingerprint(sequence, committed)


def test_a_state_the_tree_keeps_no_longer_reads_its_finished_request() -> None:
    # The finish computes the donated live state's label, so the tree's slot does not keep the request (its
    # tokens: the radix plan's peak memory doubled) alive: nothing done to that object afterwards reaches the label.
    s = make_strategy("no_buffer", MambaRadixTree(KVPool(1 << 16), StatePool(16), make_policy("lru")))
    turn1, outputs = list(range(1, 301)), list(range(1000, 1040))
    req = s.admit(turn1)
    s.prefill(req, finishes_after_prefill=False)
    for token in outputs:
        s.decode(req, [token])
    s.finish(req)
    committed = len(turn1) + len(outputs) - 1
    (slot,) = [n.state for n in s.tree.nodes.values() if n.depth == committed]
    req.tokens[len(turn1):] = [0] * len(outputs)  # were the label still deferred, it would be computed from these
    assert s.tree.state_pool.read(slot) == fingerprint(turn1 + outputs, committed)


def eager_write_prefix(self: StatePool, slot: int, source: Prefixed, n: int) -> None:
    """What every decode step did before the label was deferred."""
    self.write(slot, source.fingerprint(n))


CASES_EVERY_CACHE = {
    **CASES,
    "extra_buffer_lazy": EngineConfig(kv_tokens=400_000, state_slots=64, cache="extra_buffer_lazy", page_size=16,
                                      track_interval=16),
    "tokenspeed": EngineConfig(kv_tokens=400_000, state_slots=64, cache="tokenspeed", page_size=16),
    # the device evicts, the host writes back live states and loads them back
    "no_buffer with a host tier, tight device": EngineConfig(kv_tokens=4_000, state_slots=12, cache="no_buffer",
                                                             host_kv_tokens=1_000_000, host_state_slots=64),
}


@pytest.mark.parametrize("case", list(CASES_EVERY_CACHE))
def test_deferred_labels_simulate_exactly_as_eager_ones(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Single decode steps (every one a deferred write), on every cache: every record, step, counter, node and
    slot label equals the run whose decode steps computed each label at once."""
    rows = sessions()
    cfg, load = CASES_EVERY_CACHE[case], LoadSpec("poisson", request_rate=4.0)
    deferred_writes = 0
    lazy = StatePool.write_prefix

    def counted(self: StatePool, slot: int, source: Prefixed, n: int) -> None:
        nonlocal deferred_writes
        deferred_writes += 1
        lazy(self, slot, source, n)

    out = []
    for eager in (False, True):
        core = EngineCore(cfg)
        with monkeypatch.context() as m:
            m.setattr(StatePool, "write_prefix", eager_write_prefix if eager else counted)
            res = simulator.simulate(rows, core, timer(), arrival_schedule(rows, load, 5), decode_runs=False)
        check_invariants(core.tree)
        out.append((res, core))
    (a, ca), (b, cb) = out
    assert deferred_writes > 1_000  # most decode steps wrote a deferred label
    assert a.records == b.records and a.steps == b.steps and a == b
    assert ca.counters == cb.counters and ca.strategy.counters == cb.strategy.counters
    assert tree_state(ca.tree) == tree_state(cb.tree) and pools(ca.tree) == pools(cb.tree)
    # hits happened: labels were read by copies (the cache-off arm has none by design)
    assert cfg.cache == "disabled" or sum(r.cached_tokens for r in a.records) > 0
    if ca.host is not None and cb.host is not None:
        assert ca.host.counters == cb.host.counters and ca.host.counters.write_backs > 0
        assert ca.host.counters.load_backs > 0 or "tight" not in case
        assert tree_state(ca.host.tree) == tree_state(cb.host.tree) and pools(ca.host.tree) == pools(cb.host.tree)

