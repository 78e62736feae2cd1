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
``1 / age`` is monotone in age. ``_pick`` is the definition: one pass over every candidate per victim.
Victims are found the faster way of ``seglen_index`` (the same node, from an index the tree's change logs
keep current): per victim, a short walk of two sorted lists instead of a pass over every candidate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from reference_impl.policies.base import EvictionPolicy, TreeView
from reference_impl.policies.seglen_index import OrderIndex, stateful_ancestor_depth

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


class SeglenPolicy(EvictionPolicy):
    name = "seglen"
    tracks_changes = True

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
        # The same floats, in the same order of operations, as ``rec[i] + w * seg[i]`` over ``minmax``ed lists.
        rec = minmax([1.0 / (now - t + 1) for t in ticks])
        seg = minmax([float(n.depth - stateful_ancestor_depth(n, root, memo)) for n in nodes])
        w = self.eff_weight
        utility = [r + w * s for r, s in zip(rec, seg, strict=True)]
        low = min(utility)
        tied = [i for i, u in enumerate(utility) if u == low]
        # Ties go to the least recent: (tick, depth) in KV order, (state tick, depth) in state order, then id.
        best = min(tied, key=lambda i: (ticks[i], nodes[i].depth, nodes[i].id))
        return nodes[best]

    def _indexed(self, tree: TreeView, *, by_kv: bool) -> Node | None:
        """``_pick``'s victim, found from the tree's change logs without a pass over every candidate."""
        live = tree.evictable_leaves if by_kv else tree.evictable_states
        changed = tree.changed_leaves if by_kv else tree.changed_states
        if changed is None or not math.isfinite(self.eff_weight):
            return self._pick(tree, live.values(), by_kv=by_kv)  # a tree that keeps no logs (or an infinite weight)
        if len(live) < 2:
            return next(iter(live.values()), None)
        if not isinstance(tree.policy_state, tuple):
            tree.policy_state = (OrderIndex(by_kv=True), OrderIndex(by_kv=False))
        index: OrderIndex = tree.policy_state[0 if by_kv else 1]
        index.update(changed, live, tree.root)
        return index.pick(live, tree.clock, self.eff_weight)

    def kv_victim(self, tree: TreeView) -> Node | None:
        return self._indexed(tree, by_kv=True)

    def state_victim(self, tree: TreeView) -> Node | None:
        return self._indexed(tree, by_kv=False)
