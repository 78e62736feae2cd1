"""``MarconiCache``: Marconi's admission with Marconi (FLOP-aware) or SGLang+ (leaf LRU) eviction.

Contract (Marconi, arXiv 2411.19379), per request of a sequential replay:

* ``lookup(input)``: clock +1; reuse whole edges only; stamp the deepest fully matched node
  (``marconi``) or every visited node (``sglang_plus``).
* ``admit(input, output)``: clock +1 (insert); if α is being tuned and this is request
  ``W = bootstrap_multiplier × (requests seen at the first eviction)``, tune α once on requests
  1..W; clock +1 (speculative lookup of input+output, same stamping rule); at most two states
  are admitted (branch point if an edge must be split, plus the leaf); if the estimated bytes do
  not fit, clock +1 and evict; then insert.
* Eviction ``marconi`` (evict_v2): among non-root nodes with ≤1 child pick the minimum of
  ``α·minmax(eff) + minmax(1/(now − ts))``, ties to the first in Marconi's DFS preorder; a leaf
  is deleted, a single-child node loses its state and merges into its child. ``sglang_plus``
  (evict_v1): delete the least recently used leaf; in ``faithful`` mode equal stamps are
  broken as Marconi's heapq breaks them (heapify of the leaves in DFS preorder, stamps only).
* ``mode="faithful"`` reproduces the published simulator bit for bit, quirks included: the MLP
  saving subtracts F_attn(L_par); a deleted leaf is credited with the edge length of the *last*
  candidate of the DFS (the rightmost leaf) rather than its own; the byte estimate is made once
  before eviction (soft capacity); the lookup walk continues below a partially matched edge
  ("phantom" matches). ``mode="corrected"`` fixes all four: exact, re-checked byte accounting
  with a hard capacity (a sequence that cannot fit even in an empty cache is not admitted).
* α tuning (``eff_weight=None``): grid 0.0..2.0 step 0.1, each α replayed from an empty cache on
  requests 1..W, objective = FLOPs saved over the last ``tuning_interval`` replayed requests,
  ties → the smallest α (Marconi breaks them by worker completion order). α is 0 until then and
  stays 0 if the trace ends first.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Sequence
from typing import Literal

from reference_impl.marconi.tree import TOKEN_BYTES, HybridTree, Node, common_prefix_len, pack
from reference_impl.marconi.tuner import Requests, tune_alpha
from reference_impl.models import ModelSpec
from reference_impl.replay.api import ReplayStats

__all__ = ["Eviction", "MarconiCache", "Mode"]


class _Paused(Exception):
    """Raised (tuner only) when an admit is about to evict for the first time."""


Eviction = Literal["marconi", "sglang_plus"]
Mode = Literal["faithful", "corrected"]


class MarconiCache:
    def __init__(
        self,
        capacity_bytes: int,
        model: ModelSpec,
        *,
        eviction: Eviction,
        mode: Mode = "faithful",
        eff_weight: float | None = None,
        bootstrap_multiplier: int = 5,
        tuning_interval: int = 500,
    ) -> None:
        if eviction not in ("marconi", "sglang_plus"):
            raise ValueError(f"eviction must be 'marconi' or 'sglang_plus', got {eviction!r}")
        if mode not in ("faithful", "corrected"):
            raise ValueError(f"mode must be 'faithful' or 'corrected', got {mode!r}")
        self.capacity_bytes = capacity_bytes
        self.model = model
        self.eviction: Eviction = eviction
        self.mode: Mode = mode
        self._faithful = mode == "faithful"
        self._v2 = eviction == "marconi"
        # Faithful SGLang+ rebuilds Marconi's per-eviction heap (_evict_faithful); corrected keeps a leaf heap.
        lru_heap = not self._v2 and not self._faithful
        self.tree = HybridTree(model, candidates=self._v2, leaf_heap=lru_heap, mlp_bug=self._faithful)
        self.clock = 0
        self.alpha: float = 0.0 if eff_weight is None else eff_weight
        self._tune = self._v2 and eff_weight is None
        self.bootstrap_multiplier = bootstrap_multiplier
        self.tuning_interval = tuning_interval
        self.bootstrap_window: int | None = None
        self.tuned_at: int | None = None
        self.requests = 0
        self.reused_history: list[int] = []  # reused tokens per lookup, for FLOP objectives
        self._log: list[tuple[bytes, int]] = []
        self._pending: tuple[bytes, int] = (b"", 0)
        self._last_lookup: tuple[Sequence[int], bytes] = ((), b"")
        self._pause_before_evict = False

    # -- ReplayCache ------------------------------------------------------------------------------
    def lookup(self, input_tokens: Sequence[int]) -> int:
        buf = pack(input_tokens)
        self._last_lookup = (input_tokens, buf)  # admit() of the same request reuses the packing
        return self.lookup_packed(buf, len(input_tokens))

    def admit(self, input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        last, buf = self._last_lookup
        seq = (buf if last is input_tokens else pack(input_tokens)) + pack(output_tokens)
        self.admit_packed(seq, len(input_tokens))

    # Packed variants, on one request's input + output packed together (tree.pack_request) and the
    # input's length in tokens: a trace packed once replays without packing again (the tuner
    # replays its log 21 times; a sweep replays one trace per capacity and policy).
    def lookup_packed(self, seq: bytes, input_len: int) -> int:
        self.clock += 1
        reused = self._match(seq, input_len)[0]
        self.requests += 1
        self.reused_history.append(reused)
        return reused

    def admit_packed(self, seq: bytes, input_len: int) -> None:
        self.clock += 1  # Marconi's insert() tick
        if self._tune:
            self._log.append((seq, input_len))
            if self.bootstrap_window is not None and self.requests == self.bootstrap_window:
                self.alpha = tune_alpha(self._log, self._fixed_alpha_twin)
                self.tuned_at = self.requests
                self._tune = False
                self._log = []
        self.clock += 1  # the speculative lookup inside insert()
        reused, lcp, _ = self._match(seq, len(seq) // TOKEN_BYTES)
        if self._faithful:
            states = 2 if lcp > reused else 1
            extra = len(seq) // TOKEN_BYTES - lcp
            needed = states * self.tree.state_bytes + self.tree.kv_per_token * extra
            self._pending = (seq, needed)
        else:
            self._pending = (seq, -1)
        self._finish_admit()

    def _finish_admit(self) -> None:
        seq, needed = self._pending
        if self._faithful:
            size = self.tree.size_bytes()
            if size + needed > self.capacity_bytes:
                if self._pause_before_evict:
                    raise _Paused
                self._evict_faithful(size + needed - self.capacity_bytes)
        else:
            if self._pause_before_evict and not self._fits(seq):
                raise _Paused
            if not self._make_room_corrected(seq):
                return
        self.tree.insert(seq, self.clock, refresh_all=not self._v2)

    # -- support for the tuner: replay once up to the first eviction, then fork per α ----------
    def replay_until_first_eviction(self, requests: Requests) -> int | None:
        """Replay until an admit is about to evict; return its index (state left paused) or None."""
        self._pause_before_evict = True
        try:
            for i, (seq, input_len) in enumerate(requests):
                self.lookup_packed(seq, input_len)
                try:
                    self.admit_packed(seq, input_len)
                except _Paused:
                    return i
            return None
        finally:
            self._pause_before_evict = False

    def clone_paused(self, alpha: float) -> MarconiCache:
        """An independent copy of this (paused) cache that will evict with a fixed ``alpha``."""
        twin = copy.copy(self)
        twin.tree = self.tree.clone()
        twin.reused_history = list(self.reused_history)
        twin._log = []
        twin.alpha = alpha
        twin._tune = False
        twin._pause_before_evict = False
        return twin

    def resume_admit(self) -> None:
        """Finish the admit that :meth:`replay_until_first_eviction` paused."""
        self._finish_admit()

    def stats(self) -> ReplayStats:
        notes: list[tuple[str, float]] = []
        if self._v2:
            notes.append(("alpha", float(self.alpha)))
            if self.bootstrap_window is not None:
                notes.append(("bootstrap_window", float(self.bootstrap_window)))
            if self.tuned_at is not None:
                notes.append(("tuned_at_request", float(self.tuned_at)))
        return ReplayStats(self.tree.states_admitted, self.tree.states_evicted, tuple(notes))

    # -- internals --------------------------------------------------------------------------------
    def _fixed_alpha_twin(self, alpha: float) -> MarconiCache:
        """An empty cache like this one but with a fixed α (what the tuner replays)."""
        return MarconiCache(
            self.capacity_bytes,
            self.model,
            eviction="marconi",
            mode=self.mode,
            eff_weight=alpha,
            tuning_interval=self.tuning_interval,
        )

    def _match(self, seq: bytes, end: int) -> tuple[int, int, Node]:
        res = self.tree.match(seq, self.clock, refresh_all=not self._v2, phantom=self._faithful, end=end)
        deepest = res[2]
        if self._v2 and deepest is not self.tree.root:
            self.tree.touch(deepest, self.clock)
        return res

    def _on_first_eviction(self) -> None:
        if self.bootstrap_window is None:
            self.bootstrap_window = self.bootstrap_multiplier * self.requests

    def _evict_faithful(self, bytes_to_remove: int) -> None:
        self.clock += 1
        self._on_first_eviction()
        tree = self.tree
        freed = 0
        if self._v2:
            while freed < bytes_to_remove and tree.num_nodes > 0:
                victim = self._pick_v2()
                if victim.children:
                    freed += tree.state_bytes
                    tree.merge_into_child(victim)
                else:
                    # Quirk: Marconi credits the edge of the last DFS candidate, the rightmost leaf.
                    edge = len(tree.rightmost_leaf().key) // TOKEN_BYTES
                    freed += tree.state_bytes + tree.kv_per_token * edge
                    tree.delete_leaf(victim)
        else:
            # Marconi's evict_v1, step for step: heapify the leaves in DFS preorder comparing stamps only
            # (Node.__lt__), pop, push a parent left childless, stop at the root. Leaf stamps tie (an admit
            # that splits a leaf without evicting stamps both halves' leaves with one clock), and heapq's
            # sift order, not push order, decides those ties.
            # https://github.com/ruipeterpan/marconi/blob/0801661/radix_cache_hybrid.py (RadixCache.evict_v1,
            # RadixCache._collect_leaves)
            root = tree.root
            leaves = tree.leaves_preorder()
            heapq.heapify(leaves)
            while freed < bytes_to_remove and leaves:
                leaf = heapq.heappop(leaves)
                if leaf is root:
                    break
                parent = leaf.parent
                freed += tree.state_bytes + tree.kv_per_token * (len(leaf.key) // TOKEN_BYTES)
                tree.delete_leaf(leaf)
                if parent is not None and not parent.children:
                    heapq.heappush(leaves, parent)

    def _needed_exact(self, seq: bytes) -> int:
        """Bytes the insertion would add to the current tree (no mutation, no stamping)."""
        w = TOKEN_BYTES
        tree = self.tree
        node = tree.root
        pos = 0
        n = len(seq) // w
        states = 0
        while pos < n:
            child = node.children.get(seq[pos * w : pos * w + w])
            if child is None:
                states += 1
                break
            k = common_prefix_len(child.key, seq, pos, n)
            pos += k
            if k * w < len(child.key):
                states += 1 if pos == n else 2  # split node (+ new leaf unless seq ends there)
                break
            node = child
        return states * tree.state_bytes + (n - pos) * tree.kv_per_token

    def _fits(self, seq: bytes) -> bool:
        return self.tree.size_bytes() + self._needed_exact(seq) <= self.capacity_bytes

    def _make_room_corrected(self, seq: bytes) -> bool:
        tree = self.tree
        needed = self._needed_exact(seq)
        if tree.size_bytes() + needed <= self.capacity_bytes:
            return True
        self.clock += 1
        self._on_first_eviction()
        while tree.size_bytes() + needed > self.capacity_bytes and tree.num_nodes > 0:
            if self._v2:
                victim = self._pick_v2()
                if victim.children:
                    tree.merge_into_child(victim)
                else:
                    tree.delete_leaf(victim)
            else:
                leaf = tree.pop_lru_leaf()
                if leaf is None:
                    break
                tree.delete_leaf(leaf)
            needed = self._needed_exact(seq)  # a merge can turn a node boundary into a split
        return tree.size_bytes() + needed <= self.capacity_bytes

    def _pick_v2(self) -> Node:
        """argmin of α·minmax(eff) + minmax(recency), first in DFS preorder on exact ties."""
        tree = self.tree
        cands = tree.cands
        if len(cands) == 1:
            return cands[0]
        tss = tree.tss
        now = self.clock
        tmin = min(tss)
        tmax = max(tss)
        alpha = self.alpha
        if alpha == 0:
            # 0·x + r' is minimal exactly where the recency is minimal, i.e. the oldest stamp.
            if tss.count(tmin) == 1:
                return cands[tss.index(tmin)]
            ties = [i for i, t in enumerate(tss) if t == tmin]
        else:
            # Same float operations, in the same order, as Marconi's _normalize and utility sum.
            effs = tree.effs
            emin = min(effs)
            emax = max(effs)
            rmin = 1 / (now - tmin)
            rmax = 1 / (now - tmax)
            dr = rmax - rmin
            de = emax - emin
            if rmin != rmax and emin != emax:
                util = [alpha * ((e - emin) / de) + (1 / (now - t) - rmin) / dr for e, t in zip(effs, tss, strict=True)]
            elif rmin != rmax:
                util = [alpha * 1 + (1 / (now - t) - rmin) / dr for t in tss]
            elif emin != emax:
                util = [alpha * ((e - emin) / de) + 1.0 for e in effs]
            else:
                util = [alpha * 1 + 1.0] * len(tss)
            best = min(util)
            if util.count(best) == 1:
                return cands[util.index(best)]
            ties = [i for i, u in enumerate(util) if u == best]
        return min((cands[i] for i in ties), key=tree.preorder_key)
