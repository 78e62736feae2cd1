"""SegLen's victim without scanning every candidate: the same argmin, found from an index kept per order.

``SeglenPolicy`` picks ``argmin U``, ``U = minmax(recency) + w * minmax(seglen)``, ties to the least recent.
Each term is a chain of correctly rounded float operations that are monotone in their input, so ``U`` is
monotone (non-decreasing) in a candidate's tick and in its seglen. The normalisation needs only the extremes,
the ends of two sorted lists (candidates by seglen, candidates by tick). Walking both lists at once (Fagin's
threshold algorithm), a candidate met in neither walk yet has a seglen and a tick no smaller than the walks'
current ones, so ``U`` of those two values bounds its own from below: once the bound exceeds the best ``U``
met, no later candidate can win or tie. Every ``U`` is computed exactly as the full scan computes it, so the
victim is the same node, at a cost that grows with the walk, not with the number of candidates.

The index follows the tree's change logs (``RecencyOrders``), which name every node that joined or left an
order, was re-stamped in it or saw its nearest stateful ancestor change: a logged node's entries are dropped
and, if it is a candidate, made anew from its tick and its seglen (a walk to its nearest stateful ancestor).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reference_impl.radix.node import Node

__all__ = ["OrderIndex", "stateful_ancestor_depth"]


def stateful_ancestor_depth(node: Node, root: Node, memo: dict[int, int]) -> int:
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


class OrderIndex:
    """One order's candidates, sorted by seglen and sorted by tick: exactly the candidates after ``update``."""

    def __init__(self, by_kv: bool) -> None:
        self.by_kv = by_kv
        self.by_seg: list[tuple[int, int]] = []  # (seglen, id)
        self.by_tick: list[tuple[int, int]] = []  # (tick, id)
        self.entry: dict[int, tuple[int, int]] = {}  # id -> (seglen, tick) as indexed

    def update(self, changed: dict[int, Node | None], live: Mapping[int, Node], root: Node) -> None:
        """Re-index every logged node: drop its entries, and index it anew if it is a candidate now."""
        memo: dict[int, int] = {}
        by_seg, by_tick, entry = self.by_seg, self.by_tick, self.entry
        for nid, node in changed.items():
            old = entry.pop(nid, None)
            if old is not None:
                del by_seg[bisect_left(by_seg, (old[0], nid))]
                del by_tick[bisect_left(by_tick, (old[1], nid))]
            if node is not None and nid in live:
                seg = node.depth - stateful_ancestor_depth(node, root, memo)
                tick = node.kv_tick if self.by_kv else node.state_tick
                entry[nid] = (seg, tick)
                insort(by_seg, (seg, nid))
                insort(by_tick, (tick, nid))  # mostly at the end: a re-stamp is the newest tick
        changed.clear()

    def pick(self, live: Mapping[int, Node], now: int, w: float) -> Node:
        """The full scan's victim among ``live`` (at least two candidates, indexed by ``update``).

        Fagin's threshold algorithm over the two sorted lists: walk both at once; a candidate not met in
        either walk yet has a tick and a seglen no smaller than the walks' current ones, so its U is at least
        the bound computed from those two, and once that bound exceeds the best U met, the best is the victim."""
        segs, ticks, entry = self.by_seg, self.by_tick, self.entry
        # minmax's operations, term by term: lo and hi are the extreme values, each value maps to (v - lo) / span.
        r_lo, r_hi = 1.0 / (now - ticks[0][0] + 1), 1.0 / (now - ticks[-1][0] + 1)
        s_lo, s_hi = float(segs[0][0]), float(segs[-1][0])
        r_flat, s_flat, r_span, s_span = r_hi == r_lo, s_hi == s_lo, r_hi - r_lo, s_hi - s_lo

        def utility(seg: int, tick: int) -> float:
            rec = 1.0 if r_flat else (1.0 / (now - tick + 1) - r_lo) / r_span
            return rec + w * (1.0 if s_flat else (float(seg) - s_lo) / s_span)

        best: Node | None = None
        best_key = (0.0, 0, 0, 0)
        for (seg_floor, seg_id), (tick_floor, tick_id) in zip(segs, ticks, strict=True):
            if best is not None and utility(seg_floor, tick_floor) > best_key[0]:
                break
            for nid in (seg_id, tick_id):
                seg, tick = entry[nid]
                node = live[nid]
                key = (utility(seg, tick), tick, node.depth, nid)
                if best is None or key < best_key:
                    best, best_key = node, key
        assert best is not None
        return best
