"""The hybrid (attention + recurrent state) radix tree, modelled on SGLang's MambaRadixCache.

Semantics follow https://github.com/sgl-project/sglang (and the 0.5.23 ``UnifiedRadixCache`` where the two differ in
accounting: duplicate KV is freed on insert, evictions report every state they drop):

* Every node owns the KV of its edge; some nodes also hold one recurrent-state slot for the prefix
  that ends at the node. ``match_prefix`` returns the longest prefix ending on a node **with a
  state**; KV deeper than that is not reusable. Matching may split a node (the new parent has no
  state).
* Two recency orders. KV order covers every node; only unlocked leaves are evicted (with 0.5.9 semantics
  evicting a leaf also deletes childless tombstone ancestors; 0.5.23 keeps them as KV-only leaves). State
  order covers stateful nodes; an internal victim is tombstoned, a leaf victim is deleted with its KV. A
  hit refreshes the whole matched path in KV order but only the matched node in state order (SGLang #31643).
* Locks: a KV lock runs node→root, a state lock covers one node. Evictable/protected counters move on 0↔1.

Which victim each order yields is the eviction policy's choice (``reference_impl.policies``); the
tree keeps the candidate sets and LRU heaps every policy draws from (``reference_impl.radix.orders``). This
module does not know about requests, chunks or strategies (see ``reference_impl.lifecycle``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from reference_impl.radix.key import child_key, match_len, page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.orders import RecencyOrders
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.results import EvictResult, InsertResult, LockHandle, MatchResult

if TYPE_CHECKING:
    from reference_impl.policies.base import EvictionPolicy

__all__ = ["SGLANG_SEMANTICS", "MambaRadixTree", "cache_chunk_size"]

# The SGLang versions whose cache behaviour this tree reproduces, newest last (https://github.com/sgl-project/sglang):
#   0.5.9  MambaRadixCache: a hit refreshes the whole matched chain in the state order; insert leaves
#          duplicate KV to its caller; the branching seqlen is reported whenever it is > 0.
#   0.5.16 UnifiedRadixCache as 0.5.23, except that a split re-adds the lower half at the
#          most-recent end of the state order and the branching seqlen is reported whenever the KV
#          match goes deeper (both as 0.5.9); its scheduler keeps 0.5.9's budget of 3
#          free states per extend batch and evicts a whole allocation's KV when short
#          (reference_impl.lifecycle). Checked request by request against 0.5.16's code on CPU.
#   0.5.23 UnifiedRadixCache: a hit refreshes only the used node (#31643/#31648); insert frees
#          duplicate KV; the branching seqlen is reported only beyond the reusable prefix.
SGLANG_SEMANTICS = ("0.5.9", "0.5.16", "0.5.23")
FLA_CHUNK_SIZE = 64  # sglang/srt/layers/attention/fla/chunk_delta_h.py CHUNK_SIZE


def cache_chunk_size(model_chunk: int, semantics: str) -> int:
    """The ``chunk_size`` a release's tree gets for a model whose config chunk is ``model_chunk``: the grid (with the
    page) that extra_buffer tracks on and branch points fall on. 0.5.9 ignores the model's: its
    ``ServerArgs.mamba_cache_chunk_size`` is ``max(FLA_CHUNK_SIZE, page_size)`` (server_args.py:5124-5128 in 0.5.9);
    0.5.16 and later read the config's ``mamba_chunk_size``."""
    return FLA_CHUNK_SIZE if semantics == "0.5.9" else model_chunk


class MambaRadixTree(RecencyOrders):
    def __init__(
        self,
        kv_pool: KVPool,
        state_pool: StatePool,
        policy: EvictionPolicy,
        *,
        page_size: int = 1,
        chunk_size: int = 64,
        semantics: str = "0.5.23",
    ) -> None:
        if semantics not in SGLANG_SEMANTICS:
            raise ValueError(f"unknown SGLang semantics {semantics!r}; choose one of {', '.join(SGLANG_SEMANTICS)}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if chunk_size % page_size and page_size % chunk_size:
            raise ValueError(f"chunk size {chunk_size} and page size {page_size} must divide one another")
        super().__init__(tracks_changes=policy.tracks_changes)
        self.kv_pool = kv_pool
        self.state_pool = state_pool
        self.policy = policy
        self.semantics = semantics
        self.page_size = page_size
        self.chunk_size = max(chunk_size, page_size)
        self._next_id = 1
        self.root = Node(0, (), None, 0)
        self.root.kv_lock = 1  # the root is never evicted and is in neither order
        self.root.state_lock = 1
        self.nodes: dict[int, Node] = {}
        self.kv_evictable = 0
        self.kv_protected = 0
        self.state_evictable = 0
        self.state_protected = 0
        self.tokens_evicted_total = 0  # lifetime counters, for reports
        self.states_evicted_total = 0

    # ----------------------------------------------------------------- structure
    def _new_node(self, key: tuple[int, ...], parent: Node, depth: int) -> Node:
        node = Node(self._next_id, key, parent, depth)
        self._next_id += 1
        self.nodes[node.id] = node
        return node

    def _split(self, child: Node, split_len: int) -> Node:
        """Cut ``child``'s edge after ``split_len`` tokens; the new parent has no state."""
        parent = child.parent
        assert parent is not None
        # Splitting re-stamps the lower half as most recent in KV order (every version, checked
        # against SGLang on CPU); 0.5.9 and 0.5.16 also re-add it at the most-recent end of the state order.
        self._touch_kv(child)
        if self.semantics in ("0.5.9", "0.5.16") and child.state is not None:
            self._touch_state(child)
        new = self._new_node(child.key[:split_len], parent, child.depth - len(child.key) + split_len)
        new.kv_lock = child.kv_lock  # KV locks cover whole paths, so the upper half inherits them
        new.kv_tick = child.kv_tick  # same tick, smaller depth: just older than the child
        new.host_kv = child.host_kv
        parent.children[child_key(new.key, 0, self.page_size)] = new
        child.key = child.key[split_len:]
        child.parent = new
        new.children[child_key(child.key, 0, self.page_size)] = child
        return new

    def _delete(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None
        del parent.children[child_key(node.key, 0, self.page_size)]
        del self.nodes[node.id]
        self._forget(node)

    # ----------------------------------------------------------------- match
    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """Longest prefix of ``tokens`` ending on a node with a state (callers apply the len-1 cap)."""
        tokens = tuple(tokens)  # once here, so each edge comparison slices a tuple (one copy, not two)
        ps = self.page_size
        limit = page_floor(len(tokens), ps)
        node, pos = self.root, 0
        best, best_len = self.root, 0
        while pos < limit:
            if node.state is not None:
                best, best_len = node, pos
            child = node.children.get(child_key(tokens, pos, ps))
            if child is None:
                break
            m = match_len(child.key, tokens, pos, ps)
            if m < len(child.key):
                node = self._split(child, m)
                pos += m
                break
            pos += m
            node = child
        if node.state is not None:
            best, best_len = node, pos
        self._refresh_path(best, matched=True)
        branch = None
        if pos > best_len:
            aligned = pos // self.chunk_size * self.chunk_size
            floor = best_len if self.semantics == "0.5.23" else 0  # 0.5.16 as 0.5.9 (read from its code)
            branch = aligned if aligned > floor else None
        return MatchResult(best_len, best, pos, branch)

    def _refresh_path(self, end: Node, *, matched: bool) -> None:
        """Touch root..``end`` (root first) as a match (``end`` last, most recent) or an insert walk does."""
        path: list[Node] = []
        walk: Node | None = end
        while walk is not None and walk is not self.root:
            path.append(walk)
            walk = walk.parent
        whole_chain = self.semantics == "0.5.9"  # 0.5.9 refreshes the whole chain in state order
        for n in reversed(path):
            self._touch_kv(n)
            if whole_chain and n.state is not None and not (matched and n is end):
                self._touch_state(n)
        if matched and end is not self.root:
            self._touch_state(end)

    def rematch(self, node: Node) -> MatchResult:
        """``match_prefix`` of a key just inserted (``InsertResult.node``: stateful, no split), no token walk."""
        assert node is self.root or node.state is not None, "rematch: the key must end on a stateful node"
        self._refresh_path(node, matched=True)
        return MatchResult(node.depth, node, node.depth, None)

    # ----------------------------------------------------------------- insert
    def insert(self, tokens: Sequence[int], state: int, prev_prefix_len: int = 0, *,
               held: Node | None = None) -> InsertResult:
        """Insert ``tokens`` with one state for their end; the caller owns KV from ``prev_prefix_len`` on.

        The tree takes the caller's KV for tokens it did not have and returns the duplicates to the pool.
        If the key ends on a node that already has a state, ``state_exists`` is True and the caller frees
        ``state`` (SGLang's ``mamba_exist``). ``held``: the caller's locked node on ``tokens[:held.depth]``,
        whose path is refreshed without comparing its tokens."""
        if not tokens:
            return InsertResult(0, True, 0, self.root)
        ps = self.page_size
        if len(tokens) % ps:
            raise ValueError(f"insert key of {len(tokens)} tokens is not aligned to page size {ps}")
        key = tuple(tokens)
        node, pos = self.root, 0
        if held is not None and held is not self.root and held.kv_lock > 0 and held.depth <= len(key):
            self._refresh_path(held, matched=False)  # what the walk below does to each fully matched edge
            node, pos = held, held.depth
        while pos < len(key):
            child = node.children.get(child_key(key, pos, ps))
            if child is None:
                break
            m = match_len(child.key, key, pos, ps)
            if m < len(child.key):
                # SGLang refreshes the child, then splits it: both halves count as just used,
                # the upper half (which inherits the tick) just older than the lower.
                child = self._split(child, m)
            else:
                self._touch_kv(child)
                if self.semantics == "0.5.9" and child.state is not None:
                    self._touch_state(child)  # 0.5.9 refreshes both orders along the insert path
            pos += m
            node = child
        duplicate = max(0, pos - prev_prefix_len)
        if duplicate and self.semantics != "0.5.9":
            self.kv_pool.free(duplicate)  # 0.5.9 leaves this to the caller (cache_*_req)
        if pos < len(key):
            leaf = self._new_node(key[pos:], node, len(key))
            node.children[child_key(leaf.key, 0, ps)] = leaf
            leaf.state = state
            leaf.kv_tick = self.tick()
            leaf.state_tick = self.tick()
            self.kv_evictable += len(leaf.key)
            self.state_evictable += 1
            self._refresh_candidacy(leaf)
            self._refresh_candidacy(node)  # a stateful leaf just got a child
            return InsertResult(pos, False, duplicate, leaf)
        if node.state is None:
            node.state = state  # revive a tombstone (or a split point) with the new state
            node.state_tick = self.tick()
            if node.state_lock:
                self.state_protected += 1
            else:
                self.state_evictable += 1
            self._refresh_candidacy(node)
            return InsertResult(pos, False, duplicate, node)
        # The key ends on a node that already has a state: that state becomes the most recent
        # (0.5.23 MambaComponent.commit_insert_component_data; 0.5.9 via its insert-path refresh).
        self._touch_state(node)
        return InsertResult(pos, True, duplicate, node)

    # ----------------------------------------------------------------- locks
    def lock(self, node: Node) -> LockHandle:
        state_locked = node is not self.root and node.state is not None
        if state_locked:
            node.state_lock += 1
            if node.state_lock == 1:
                self.state_evictable -= 1
                self.state_protected += 1
                self._refresh_candidacy(node)  # only the first state lock takes it out of the state order
        # Only a childless node's candidacy depends on its KV lock, and only on 0 <-> 1: the rest of the
        # walk changes counters alone (the walk is the lock's whole cost, once per node per request).
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            walk.kv_lock += 1
            if walk.kv_lock == 1:
                self.kv_evictable -= len(walk.key)
                self.kv_protected += len(walk.key)
                if not walk.children:
                    self._refresh_candidacy(walk)
            walk = walk.parent
        return LockHandle(node, state_locked)

    def unlock(self, handle: LockHandle) -> None:
        node = handle.node
        if handle.state_locked:
            if node.state_lock <= 0 or node.state is None:
                raise RuntimeError(f"unbalanced state unlock on {node}")
            node.state_lock -= 1
            if node.state_lock == 0:
                self.state_protected -= 1
                self.state_evictable += 1
        state_freed = handle.state_locked and node.state_lock == 0
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            if walk.kv_lock <= 0:
                raise RuntimeError(f"unbalanced KV unlock on {walk}")
            walk.kv_lock -= 1
            if walk.kv_lock == 0:
                self.kv_protected -= len(walk.key)
                self.kv_evictable += len(walk.key)
                if not walk.children:
                    self._refresh_candidacy(walk)
            walk = walk.parent
        if state_freed:
            self._refresh_candidacy(node)  # as in lock: the KV walk refreshed only what its lock decides

    # ----------------------------------------------------------------- eviction
    def evict(self, num_tokens: int = 0, num_states: int = 0) -> EvictResult:
        """Free at least ``num_tokens`` KV tokens, then at least ``num_states`` states, if possible."""
        tokens = kv_pass_states = 0
        while tokens < num_tokens:
            leaf = self.policy.kv_victim(self)
            if leaf is None:
                break
            t, s = self._evict_leaf(leaf)
            tokens += t
            kv_pass_states += s
        # 0.5.23 counts the states the KV pass already freed against the state target; 0.5.9's
        # evict_mamba starts its own count at zero.
        counted = 0 if self.semantics == "0.5.9" else kv_pass_states
        state_pass = 0
        while counted + state_pass < num_states:
            node = self.policy.state_victim(self)
            if node is None:
                break
            if node.children:
                self._tombstone(node)
                state_pass += 1
            else:
                t, s = self._evict_leaf(node)
                tokens += t
                state_pass += s
        states = kv_pass_states + state_pass
        self.tokens_evicted_total += tokens
        self.states_evicted_total += states
        return EvictResult(tokens, states)

    def _tombstone(self, node: Node) -> None:
        assert node.state is not None and node.state_lock == 0
        self.state_pool.free(node.state)
        node.state = None
        self.state_evictable -= 1
        self._refresh_candidacy(node)

    def _evict_leaf(self, leaf: Node) -> tuple[int, int]:
        """Delete an unlocked leaf with its KV and its state (if it has one)."""
        if leaf.kv_lock or leaf.state_lock or leaf.children or leaf is self.root:
            raise RuntimeError(f"evict leaf node invalid: {leaf}")
        states = 0
        if leaf.state is not None:
            self.state_pool.free(leaf.state)
            leaf.state = None
            self.state_evictable -= 1
            states = 1
        freed = len(leaf.key)
        self.kv_pool.free(freed)
        self.kv_evictable -= freed
        self._delete(leaf)
        parent = leaf.parent
        assert parent is not None
        if self.semantics == "0.5.9":
            # 0.5.9 keeps "every leaf has a state": a stateless leaf could never be matched, so
            # childless tombstone ancestors go too. 0.5.23 keeps them as KV-only leaves ("only the
            # Full component decides whether a node survives"); KV eviction removes them later.
            while parent is not self.root and parent.state is None and not parent.children and not parent.kv_lock:
                self.kv_pool.free(len(parent.key))
                self.kv_evictable -= len(parent.key)
                freed += len(parent.key)
                self._delete(parent)
                assert parent.parent is not None
                parent = parent.parent
        self._refresh_candidacy(parent)
        return freed, states

    # ----------------------------------------------------------------- sizes
    def total_kv_tokens(self) -> int:
        return self.kv_evictable + self.kv_protected

    def total_states(self) -> int:
        return self.state_evictable + self.state_protected
