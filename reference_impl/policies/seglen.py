"""SegLen eviction: keep states that save long replays, trade that off against recency.

SGLang PR #22172 describes seglen as ranking candidates by "replay length to the nearest reusable
Mamba ancestor, combined with recency", weighted by ``--seglen-eff-weight``; its code is not public,
so this is the exact formula chosen here (Marconi, arXiv 2411.19379):

    seglen(n)  = n.depth - depth(nearest proper ancestor of n that holds a state)   (root: depth 0)
    recency(n) = 1 / (clock - tick(n) + 1)        tick = KV tick (leaf victims) or state tick
    U(n)       = minmax(recency)(n) + eff_weight * minmax(seglen)(n)      evict argmin U

``minmax`` normalises over the current candidates, giving 1 to every candidate when all values are
equal (as Marconi's ``_normalize`` does). Ties go to the least recent candidate.

Why this form: it is Marconi's utility (recency + α · FLOP efficiency, Marconi, arXiv 2411.19379)
with the FLOP-efficiency term replaced by the replay distance that seglen uses to approximate it;
the distance is measured to the nearest ancestor that *still* holds a state, because after a
tombstone a hit falls back there, not to the immediate parent. It reproduces the worked example of
the SegLen blog (candidates A, B, C, E: B, the only shorter segment, goes first; ties among equal
segments fall back to recency), and ``eff_weight = 0`` orders victims exactly like LRU, because
``1 / age`` is monotone in age. Cost: one pass over the candidates per victim, with ancestor
distances memoised within the pass, so the work per eviction is linear in the number of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from reference_impl.policies.base import EvictionPolicy, TreeView

if TYPE_CHECKING:
    from reference_impl.radix.node import Node

__all__ = ["SeglenPolicy", "minmax"]

DEFAULT_EFF_WEIGHT = 0.85  # the value in the seglen PR's example launch command


def minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    span = hi - lo
    return [(v - lo) / span for v in values]


def _stateful_ancestor_depth(node: Node, root: Node, memo: dict[int, int]) -> int:
    """Depth of the nearest proper ancestor of ``node`` that holds a state (0 for the root)."""
    chain: list[Node] = []
    walk = node.parent
    depth = 0
    while walk is not None and walk is not root:
        if walk.id in memo:
            depth = memo[walk.id]
            break
        if walk.state is not None:
            depth = walk.depth
            break
        chain.append(walk)
        walk = walk.parent
    # Every node on the walked chain is a tombstone, so it shares the answer.
    for visited in chain:
        memo[visited.id] = depth
    return depth


class SeglenPolicy(EvictionPolicy):
    name = "seglen"

    def __init__(self, eff_weight: float = DEFAULT_EFF_WEIGHT) -> None:
        if eff_weight < 0:
            raise ValueError(f"seglen eff_weight must be >= 0, got {eff_weight}")
        self.eff_weight = eff_weight

    def _pick(self, tree: TreeView, candidates: Iterable[Node], *, by_kv: bool) -> Node | None:
        nodes = list(candidates)
        if len(nodes) < 2:
            return nodes[0] if nodes else None
        memo: dict[int, int] = {}
        now, root = tree.clock, tree.root
        ticks = [n.kv_tick for n in nodes] if by_kv else [n.state_tick for n in nodes]
        # The same floats, in the same order of operations, as ``rec[i] + w * seg[i]`` over ``minmax``ed
        # lists; the lists are built with plain comprehensions (no per-candidate lambda or tuple) because
        # this runs once per victim over every candidate, the seglen replay's hot loop.
        rec = minmax([1.0 / (now - t + 1) for t in ticks])
        seg = minmax([float(n.depth - _stateful_ancestor_depth(n, root, memo)) for n in nodes])
        w = self.eff_weight
        utility = [r + w * s for r, s in zip(rec, seg, strict=True)]
        low = min(utility)
        tied = [i for i, u in enumerate(utility) if u == low]
        # Ties go to the least recent: (tick, depth) in KV order, (state tick, depth) in state order, then id.
        best = min(tied, key=lambda i: (ticks[i], nodes[i].depth, nodes[i].id))
        return nodes[best]

    def kv_victim(self, tree: TreeView) -> Node | None:
        return self._pick(tree, tree.evictable_leaves.values(), by_kv=True)

    def state_victim(self, tree: TreeView) -> Node | None:
        return self._pick(tree, tree.evictable_states.values(), by_kv=False)
