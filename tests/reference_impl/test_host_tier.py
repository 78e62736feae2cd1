"""Host (L2) tier: hits survive device eviction, reuse needs KV and state, the host evicts LRU."""

from __future__ import annotations

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle import Strategy, fingerprint, make_strategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import MambaRadixTree


def build(host: HostTier | None, *, kv: int = 700, states: int = 8) -> Strategy:
    tree = MambaRadixTree(KVPool(kv), StatePool(states), make_policy("lru"))
    return make_strategy("no_buffer", tree, host=host)


def serve(s: Strategy, inputs: list[int], outputs: list[int]) -> int:
    req = s.admit(inputs)
    check_invariants(s.tree, held_kv_tokens=req.held_kv, held_states=req.held_states())
    s.prefill(req, finishes_after_prefill=False)
    s.decode(req, outputs)
    s.finish(req)
    check_invariants(s.tree)
    if s.host is not None:
        check_invariants(s.host.tree)
    return req.prefix_len


def session(base: int, n: int = 300) -> list[int]:
    return list(range(base, base + n))


def test_a_hit_survives_device_eviction_through_the_host() -> None:
    for host in (None, HostTier(kv_tokens=10_000, state_slots=64)):
        s = build(host)
        a = session(0)
        serve(s, a, [1, 2, 3])
        for other in (1000, 2000, 3000):  # each fills most of the 700-token device
            serve(s, session(other), [1, 2])
        turn2 = [*a, 1, 2, 3, 77, 78]
        cached = serve(s, turn2, [5])
        if host is None:
            assert cached == 0
        else:
            assert cached == len(a) + 2  # input + output - 1, loaded back from the host
            assert host.counters.load_backs == 1
            assert host.counters.load_back_tokens == len(a) + 2
            # The loaded prefix is on the device again: the next lookup needs no transfer.
            req = s.admit([*turn2, 5, 9])
            assert req.prefix_len == len(turn2) and host.counters.load_backs == 1
            assert s.tree.state_pool.content[req.live_state or 0] == fingerprint([*turn2, 5], len(turn2))
            s.release(req)


def test_host_kv_without_a_host_state_is_not_reusable() -> None:
    host = HostTier(kv_tokens=1000, state_slots=4)
    short = session(0, 100)
    long_ = session(0, 200)
    assert host.write_back(short, fingerprint(short, 100))
    assert host.write_back(long_, fingerprint(long_, 200))
    assert host.match([*long_, 5]) == (200, fingerprint(long_, 200))
    host.tree.evict(num_states=1)  # drops the least recent host state: the 100-token prefix's
    check_invariants(host.tree)
    assert host.match([*short, 5])[0] == 0  # its KV is still on the host, its state is not
    assert host.match([*long_, 5])[0] == 200


def test_host_evicts_least_recently_used_sequences_when_full() -> None:
    host = HostTier(kv_tokens=450, state_slots=8)
    a, b, c = session(0, 200), session(1000, 200), session(2000, 200)
    assert host.write_back(a, fingerprint(a, 200))
    assert host.write_back(b, fingerprint(b, 200))
    host.match([*a, 1])  # a is now more recent than b
    assert host.write_back(c, fingerprint(c, 200))  # needs room: b goes
    check_invariants(host.tree)
    assert host.match([*a, 1])[0] == 200
    assert host.match([*b, 1])[0] == 0
    assert host.match([*c, 1])[0] == 200
    assert not host.write_back(session(5000, 600), fingerprint(session(5000, 600), 600))  # never fits
    assert host.counters.write_back_failures == 1
