"""SGLang+ (Marconi's evict_v1) with equal leaf stamps: ties go the way Marconi's heapq sends them.

An admit that splits a leaf without evicting stamps the split-off remainder (speculative lookup)
and the new leaf (insert) with the same clock. Marconi heapifies its leaves in DFS preorder and
compares stamps only, so heapq's sift order, not age of entry, picks between the two. Expected
values were checked against Marconi's simulator (github.com/ruipeterpan/marconi at 0801661,
``RadixCache(evict_policy_version=1, use_logical_ts=True)``) on the same requests.
"""

from __future__ import annotations

from reference_impl.marconi import MarconiCache
from reference_impl.models import get_model

MODEL = get_model("marconi-7b")
S = MODEL.state_bytes()
K = MODEL.kv_bytes_per_token()


def toks(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


A_IN, A_OUT = toks(100, 10), toks(200, 5)  # leaf A: 15 tokens
C_IN, C_OUT = toks(300, 4), toks(400, 2)  # leaf C: 6 tokens, a later root slot than A
B_IN, B_OUT = (*toks(100, 6), *toks(500, 4)), toks(600, 2)  # splits A after 6 tokens: top, A', B
D_IN, D_OUT = toks(700, 30), toks(800, 2)  # needs C's bytes and one more leaf
E_IN = (*A_IN, *A_OUT, *toks(900, 3))  # A's whole path plus a new turn


def requests() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(A_IN, A_OUT), (C_IN, C_OUT), (B_IN, B_OUT), (D_IN, D_OUT), (E_IN, toks(950, 2))]


def capacity() -> int:
    # Before D: top (6 tokens), A' (9), B (6), C (6) -> 4 states, 27 tokens. D needs 1 state + 32 tokens.
    before_d = 4 * S + 27 * K
    needed_d = S + 32 * K
    c_bytes = S + 6 * K
    return before_d + needed_d - c_bytes - 1  # evict C, then exactly one of the tied leaves A', B


def test_split_without_eviction_ties_the_two_leaves() -> None:
    cache = MarconiCache(10**15, MODEL, eviction="sglang_plus")
    for inp, out in requests()[:3]:
        cache.lookup(inp)
        cache.admit(inp, out)
    top = cache.tree.root.children[next(iter(cache.tree.root.children))]
    a_rest, b = top.children.values()
    assert a_rest.ts == b.ts and not a_rest.children and not b.children


def test_faithful_breaks_stamp_ties_in_marconis_heap_order() -> None:
    cache = MarconiCache(capacity(), MODEL, eviction="sglang_plus", mode="faithful")
    hits = []
    for inp, out in requests():
        hits.append(cache.lookup(inp))
        cache.admit(inp, out)
    # heapify([A', B, C]) puts C on top and, after popping it, B: A' survives, so E reuses A's
    # whole 15-token path. Breaking the tie by age of heap entry would evict A' and reuse only 6.
    assert hits == [0, 0, 0, 0, 15]
    assert cache.tree.states_evicted == 2
