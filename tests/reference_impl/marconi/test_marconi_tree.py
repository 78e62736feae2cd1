"""Behaviour of MarconiCache (Marconi and SGLang+ eviction over Marconi's admission)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_model import TOY

from reference_impl.marconi import MarconiCache
from reference_impl.marconi.tree import TOKEN_BYTES, HybridTree, Node, common_prefix_len, pack, pack_request
from reference_impl.models import get_model

# A toy model with readable sizes: one state = 50 B, one token of KV = 2 B.
BIG = 10**12
Req = tuple[tuple[int, ...], tuple[int, ...]]


def toks(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


def swe_like(seed: int, sessions: int = 8, turns: int = 8) -> list[Req]:
    """Interleaved agent sessions: shared prompt, growing history, old observations collapsed."""
    rng = random.Random(seed)
    system = tuple(rng.randrange(3, 500) for _ in range(40))
    placeholder = (1, 2, 7, 7)
    state = []
    for _ in range(sessions):
        state.append([[system, (1, 2, *(rng.randrange(3, 500) for _ in range(rng.randint(5, 30))))], []])
    out: list[Req] = []
    live = list(range(sessions))
    remaining = {s: rng.randint(2, turns) for s in live}
    while live:
        s = rng.choice(live)
        hist, obs = state[s]
        inp = tuple(t for m in hist for t in m)
        act = (1, 2, *(rng.randrange(3, 500) for _ in range(rng.randint(2, 15))))
        out.append((inp, act))
        hist.append(act)
        hist.append((1, 2, *(rng.randrange(3, 500) for _ in range(rng.choice([3, 10, 40])))))
        obs.append(len(hist) - 1)
        if len(obs) > 2:
            hist[obs.pop(0)] = placeholder
        remaining[s] -= 1
        if remaining[s] == 0:
            live.remove(s)
    return out


def replay(cache: MarconiCache, reqs: list[Req]) -> list[int]:
    hits = []
    for inp, outp in reqs:
        hits.append(cache.lookup(inp))
        cache.admit(inp, outp)
    return hits


@pytest.mark.parametrize("eviction", ["marconi", "sglang_plus"])
def test_shared_prefix_hits_from_third_occurrence(eviction: str) -> None:
    prefix = toks(1000, 50)
    cache = MarconiCache(BIG, TOY, eviction=eviction)  # type: ignore[arg-type]
    got = []
    for i in range(4):
        inp = prefix + toks(2000 + 100 * i, 10)
        got.append(cache.lookup(inp))
        cache.admit(inp, toks(5000 + 100 * i, 5))
    # 1st builds the path, 2nd splits it (checkpoint at the branch point), 3rd and 4th reuse it.
    assert got == [0, 0, 50, 50]
    # Admission: 1 state for the first sequence, 2 (branch + leaf) for the second, then 1 each.
    assert cache.stats().states_admitted == 1 + 2 + 1 + 1


@pytest.mark.parametrize("eviction", ["marconi", "sglang_plus"])
def test_multi_turn_reuses_input_and_output(eviction: str) -> None:
    cache = MarconiCache(BIG, TOY, eviction=eviction)  # type: ignore[arg-type]
    in1, out1 = toks(10, 30), toks(100, 7)
    assert cache.lookup(in1) == 0
    cache.admit(in1, out1)
    in2 = in1 + out1 + toks(300, 5)
    assert cache.lookup(in2) == 37
    cache.admit(in2, toks(400, 3))
    assert cache.lookup(in2 + toks(400, 3) + (9,)) == 45
    # No split ever happened: one state per sequence, the old leaf became an intermediate node.
    assert cache.stats().states_admitted == 2


def test_intermediate_eviction_frees_only_the_state() -> None:
    cache = MarconiCache(BIG, TOY, eviction="marconi", eff_weight=0.0)
    in1, out1 = toks(10, 20), toks(100, 5)
    cache.lookup(in1)
    cache.admit(in1, out1)
    in2 = in1 + out1 + toks(200, 5)
    cache.lookup(in2)
    cache.admit(in2, toks(300, 5))  # node A = in1+out1 (1 child), leaf B below it
    tree = cache.tree
    assert tree.num_nodes == 2 and tree.num_tokens == 35
    before = tree.size_bytes()
    # A refreshed at the lookup of in2 but B is newer; evicting the oldest candidate takes A.
    cache.capacity_bytes = before - 1
    cache._evict_faithful(1)
    assert tree.num_nodes == 1 and tree.num_tokens == 35
    assert tree.size_bytes() == before - TOY.state_bytes()
    # The merged node still serves the whole sequence, but not the prefix that lost its state.
    cache.capacity_bytes = BIG
    assert cache.lookup(in2 + toks(300, 5) + (1,)) == 35
    assert cache.lookup(in1 + out1 + (7, 7)) == 0


def _marconi_dfs_pick(tree: HybridTree, now: int, alpha: float, mlp_bug: bool) -> Node:
    """Marconi's evict_v2 choice recomputed the slow way: DFS, normalize, first minimum."""
    cands: list[Node] = []
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if node is not tree.root and len(node.children) <= 1:
            cands.append(node)
        stack.extend(reversed(list(node.children.values())))
    m = TOY if tree.model is TOY else tree.model
    effs, recs = [], []
    for c in cands:
        depth, edge = 0, len(c.key) // TOKEN_BYTES
        p: Node | None = c
        while p is not None:
            depth += len(p.key) // TOKEN_BYTES
            p = p.parent
        par = depth - edge
        sub = m.attn_layer_flops(par) if mlp_bug else m.mlp_layer_flops(par)
        fl = (
            m.num_ssm_layers * m.ssm_layer_flops(edge)
            + m.num_attn_layers * (m.attn_layer_flops(depth) - m.attn_layer_flops(par))
            + m.num_mlp_layers * (m.mlp_layer_flops(depth) - sub)
        )
        effs.append(fl / (m.state_bytes() + m.kv_bytes_per_token() * depth))
        recs.append(1 / (now - c.ts))

    def norm(v: list[float]) -> list[float]:
        lo, hi = min(v), max(v)
        return [(x - lo) / (hi - lo) for x in v] if len(v) > 1 and lo != hi else [1.0] * len(v)

    util = [alpha * e + r for e, r in zip(norm(effs), norm(recs), strict=False)]
    return cands[util.index(min(util))]


@pytest.mark.parametrize("alpha", [0.0, 0.3, 2.0])
@pytest.mark.parametrize("mode", ["faithful", "corrected"])
@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_candidates_pick_what_a_full_dfs_picks(alpha: float, mode: str, seed: int) -> None:
    cache = MarconiCache(3000, TOY, eviction="marconi", mode=mode, eff_weight=alpha)  # type: ignore[arg-type]
    picks = 0
    original = cache._pick_v2

    def checked() -> Node:
        nonlocal picks
        want = _marconi_dfs_pick(cache.tree, cache.clock, alpha, mode == "faithful")
        got = original()
        assert got is want
        picks += 1
        return got

    cache._pick_v2 = checked  # type: ignore[method-assign]
    replay(cache, swe_like(seed))
    assert picks > 20  # the trace really exercised eviction


def test_alpha_zero_is_lru_over_the_candidate_set() -> None:
    cache = MarconiCache(2500, TOY, eviction="marconi", eff_weight=0.0)
    original = cache._pick_v2
    seen = 0

    def checked() -> Node:
        nonlocal seen
        got = original()
        oldest = min(cache.tree.tss)
        assert got.ts == oldest
        assert len(got.children) <= 1
        seen += 1
        return got

    cache._pick_v2 = checked  # type: ignore[method-assign]
    replay(cache, swe_like(3))
    assert seen > 10


@pytest.mark.parametrize(("alpha", "survivor"), [(0.0, "short"), (2.0, "long")])
def test_flop_efficiency_protects_long_prefixes(alpha: float, survivor: str) -> None:
    long_in, short_in = toks(10_000, 400), toks(50_000, 20)
    m = get_model("marconi-7b")
    cache = MarconiCache(BIG, m, eviction="marconi", eff_weight=alpha)
    for inp in (long_in, short_in):  # the long one is older
        cache.lookup(inp)
        cache.admit(inp, ())
    cache.capacity_bytes = cache.tree.size_bytes() + 1  # the next admit must evict one state
    third = toks(90_000, 5)
    cache.lookup(third)
    cache.admit(third, ())
    hits = {"long": cache.lookup((*long_in, 1)), "short": cache.lookup((*short_in, 1))}
    assert hits[survivor] > 0
    assert [k for k, v in hits.items() if v] == [survivor]


def test_faithful_mlp_term_subtracts_attention_flops() -> None:
    m = get_model("marconi-7b")
    f = HybridTree(m, candidates=True, leaf_heap=False, mlp_bug=True)
    c = HybridTree(m, candidates=True, leaf_heap=False, mlp_bug=False)
    for t in (f, c):
        t.insert(b"".join(x.to_bytes(4, "little") for x in toks(1, 300)), 1, refresh_all=False)
        t.insert(b"".join(x.to_bytes(4, "little") for x in toks(1, 100) + toks(999, 50)), 2, refresh_all=False)
    root_f = next(iter(f.root.children.values()))
    root_c = next(iter(c.root.children.values()))
    assert root_f.eff == root_c.eff  # L_par = 0: the quirk has nothing to subtract
    leaf_f = next(iter(root_f.children.values()))
    leaf_c = next(iter(root_c.children.values()))
    mem = m.state_bytes() + m.kv_bytes_per_token() * 300
    diff = 28 * (m.mlp_layer_flops(100) - m.attn_layer_flops(100)) / mem
    assert leaf_f.eff - leaf_c.eff == pytest.approx(diff, rel=1e-9)


def test_faithful_credits_the_rightmost_leaf_when_deleting_a_leaf() -> None:
    results = {}
    for mode in ("faithful", "corrected"):
        cache = MarconiCache(BIG, TOY, eviction="marconi", mode=mode, eff_weight=0.0)  # type: ignore[arg-type]
        a, b = toks(100, 300), toks(5000, 10)  # A: old, long edge; B: newest, rightmost leaf
        for inp in (a, b):
            cache.lookup(inp)
            cache.admit(inp, ())
        # The next sequence needs 50 + 2·5 B beyond capacity minus 100 B: more than A's credit
        # under the quirk (50 + 2·10) but much less than A's real size (50 + 2·300).
        cache.capacity_bytes = cache.tree.size_bytes() + 60 - 100
        c = toks(9000, 5)
        cache.lookup(c)
        cache.admit(c, ())
        results[mode] = (cache.lookup((*a, 1)), cache.lookup((*b, 1)))
    assert results["corrected"] == (0, 10)  # A alone frees enough
    assert results["faithful"] == (0, 0)  # credited 70 B for A, so B goes too


def test_faithful_lookup_keeps_walking_below_a_partial_edge() -> None:
    got = {}
    for mode in ("faithful", "corrected"):
        cache = MarconiCache(BIG, TOY, eviction="sglang_plus", mode=mode)  # type: ignore[arg-type]
        for seq in ((1, 2, 3, 4, 10, 11), (1, 2, 3, 4, 20, 21)):
            cache.lookup(seq)
            cache.admit(seq, ())
        got[mode] = cache.lookup((1, 2, 10, 11, 12))  # diverges inside edge (1, 2, 3, 4)
    assert got == {"faithful": 2, "corrected": 0}


@pytest.mark.parametrize("eviction", ["marconi", "sglang_plus"])
def test_corrected_mode_never_exceeds_capacity(eviction: str) -> None:
    cap = 2200
    cache = MarconiCache(cap, TOY, eviction=eviction, mode="corrected", eff_weight=0.5)  # type: ignore[arg-type]
    faithful = MarconiCache(cap, TOY, eviction=eviction, mode="faithful", eff_weight=0.5)  # type: ignore[arg-type]
    over = 0
    for inp, outp in swe_like(4):
        for c in (cache, faithful):
            c.lookup(inp)
            c.admit(inp, outp)
        assert cache.tree.size_bytes() <= cap
        over += faithful.tree.size_bytes() > cap
    if eviction == "marconi":
        assert over > 0  # the published accounting (wrong leaf credit) is soft; corrected is not


def test_sequence_larger_than_capacity_is_not_admitted_when_corrected() -> None:
    cache = MarconiCache(100, TOY, eviction="marconi", mode="corrected")
    cache.lookup(toks(1, 40))
    cache.admit(toks(1, 40), ())
    assert cache.tree.num_nodes == 0 and cache.stats().states_admitted == 0


def test_sglang_plus_evicts_least_recent_leaf() -> None:
    cache = MarconiCache(BIG, TOY, eviction="sglang_plus")
    a, b, c = toks(100, 10), toks(200, 10), toks(300, 10)
    for inp in (a, b, c):
        cache.lookup(inp)
        cache.admit(inp, ())
    cache.lookup((*a, 1))  # refresh a: b is now the least recently used
    cache.capacity_bytes = cache.tree.size_bytes() + 1
    d = toks(400, 10)
    cache.lookup(d)
    cache.admit(d, ())
    assert [cache.lookup((*x, 1)) for x in (a, b, c)] == [10, 0, 10]
    assert cache.stats().states_evicted == 1


def test_replay_is_deterministic() -> None:
    reqs = swe_like(5)
    runs = [replay(MarconiCache(2500, TOY, eviction="marconi", bootstrap_multiplier=2), reqs) for _ in range(2)]
    assert runs[0] == runs[1]


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="eviction"):
        MarconiCache(1, TOY, eviction="lru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        MarconiCache(1, TOY, eviction="marconi", mode="exact")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=700),
    st.integers(0, 700),
    st.integers(0, 2**32 - 1),
    st.integers(0, 40),
    st.integers(0, 800),
)
def test_common_prefix_len_is_a_token_walk(edge: list[int], diverge: int, token: int, start: int, end: int) -> None:
    # seq holds the edge from ``start`` on, with one token replaced at ``diverge`` (if it falls inside).
    tail = list(edge)
    if diverge < len(tail):
        tail[diverge] = token
    seq = [7] * start + tail + [9, 9]
    end = min(max(end, start), len(seq))
    naive = 0
    while naive < len(edge) and start + naive < end and edge[naive] == seq[start + naive]:
        naive += 1
    assert common_prefix_len(pack(edge), pack(seq), start, end) == naive


@pytest.mark.parametrize("eviction", ["marconi", "sglang_plus"])
@pytest.mark.parametrize("mode", ["faithful", "corrected"])
def test_packed_replay_equals_token_replay(eviction: str, mode: str) -> None:
    reqs = swe_like(11, sessions=10, turns=10)
    caches = [MarconiCache(3000, TOY, eviction=eviction, mode=mode, bootstrap_multiplier=2) for _ in range(2)]  # type: ignore[arg-type]
    by_tokens = replay(caches[0], reqs)
    by_bytes = []
    for inp, outp in reqs:
        seq, input_len = pack_request(inp, outp)
        by_bytes.append(caches[1].lookup_packed(seq, input_len))
        caches[1].admit_packed(seq, input_len)
    assert by_bytes == by_tokens
    assert sum(by_tokens) > 0 and caches[0].stats() == caches[1].stats()
    assert caches[0].stats().states_evicted > 0  # the capacity is small enough to exercise eviction
