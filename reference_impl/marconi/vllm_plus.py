"""``VllmPlusCache``: Marconi's vLLM+ baseline, a block-granular tree with leaf LRU (Marconi, arXiv 2411.19379).

Contract, per request of a sequential replay (logical clock as in Marconi's ``radix_cache_vllm``):

* Every node is one token block of ``block_size`` tokens (the last block of a sequence may be
  partial) and holds its own SSM checkpoint, so a hit may end on any block boundary.
* ``lookup(input)``: clock +1; descend through children whose key equals the next full block;
  then at most one partial child whose whole key is a prefix of the rest (first such child in
  insertion order). Every node descended into is stamped; the partial child is not.
* ``admit(input, output)``: clock +1; speculative lookup (clock +1, stamps as above); space
  estimate with Marconi's quirk ``extra = len − block_size·(matched nodes + 1)`` tokens and
  ``extra / block_size`` (fractional) states; if over capacity, clock +1 and delete least
  recently stamped leaves until the estimate is freed (a parent becomes a leaf when its last
  child goes); then insert: fill a partial block reached by the walk before opening new blocks,
  stamping every node visited. No two live leaves share a stamp, so no tie-break ever decides
  which leaf goes (see ``_evict``).
* Iterative throughout (Marconi's version recurses once per block). Token ids are packed into
  bytes (``tree.pack``), so a block key is a byte string that hashes and compares with
  ``memcmp``; offsets inside the walks are in bytes, counts and the API in tokens.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from reference_impl.marconi.tree import TOKEN_BYTES, common_prefix_len, pack
from reference_impl.models import ModelSpec
from reference_impl.replay.api import ReplayStats

__all__ = ["VllmPlusCache"]


class _Block:
    __slots__ = ("alive", "by_first", "children", "key", "parent", "ts")

    def __init__(self, key: bytes, parent: _Block | None, ts: int) -> None:
        self.key = key  # packed tokens of this block
        self.parent = parent
        self.ts = ts
        self.children: dict[bytes, _Block] = {}  # keyed by the whole block, insertion-ordered
        # Children grouped by first token, each list in the same relative order as ``children``.
        self.by_first: dict[bytes, list[_Block]] = {}
        self.alive = True


class VllmPlusCache:
    def __init__(self, capacity_bytes: int, model: ModelSpec, block_size: int = 32) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.capacity_bytes = capacity_bytes
        self.model = model
        self.block_size = block_size
        self.root = _Block(b"", None, 0)
        self.clock = 0
        self.num_nodes = 0
        self.num_tokens = 0
        self.state_bytes = model.state_bytes()
        self.kv_per_token = model.kv_bytes_per_token()
        self.states_admitted = 0
        self.states_evicted = 0
        self._heap: list[tuple[int, int, _Block]] = []
        self._seq = 0
        self._last_lookup: tuple[Sequence[int], bytes] = ((), b"")

    # -- ReplayCache ------------------------------------------------------------------------------
    def lookup(self, input_tokens: Sequence[int]) -> int:
        buf = pack(input_tokens)
        self._last_lookup = (input_tokens, buf)  # admit() of the same request reuses the packing
        return self.lookup_packed(buf, len(input_tokens))

    def admit(self, input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        last, buf = self._last_lookup
        seq = (buf if last is input_tokens else pack(input_tokens)) + pack(output_tokens)
        self.admit_packed(seq, len(input_tokens))

    # Packed variants (``tree.pack_request``: input + output packed together, the input's length).
    def lookup_packed(self, seq: bytes, input_len: int) -> int:
        self.clock += 1
        return self._match(seq, input_len * TOKEN_BYTES)[0]

    def admit_packed(self, seq: bytes, input_len: int) -> None:
        self.clock += 1
        self.clock += 1
        _, accessed = self._match(seq, len(seq))
        m = self.model
        bs = self.block_size
        extra = len(seq) // TOKEN_BYTES - bs * accessed  # Marconi's estimate: ``accessed`` counts the root too
        # Same float evaluation order as Marconi: (extra/bs) · L_ssm · S_layer + L_attn · KV(extra).
        needed = extra / bs * m.num_ssm_layers * m.ssm_state_bytes_per_layer + self.kv_per_token * extra
        size = self.num_nodes * self.state_bytes + self.num_tokens * self.kv_per_token
        if size + needed > self.capacity_bytes:
            self._evict(size + needed - self.capacity_bytes)
        self._insert(seq)

    def stats(self) -> ReplayStats:
        return ReplayStats(self.states_admitted, self.states_evicted, (("block_size", float(self.block_size)),))

    # -- internals --------------------------------------------------------------------------------
    def _touch(self, node: _Block) -> None:
        node.ts = self.clock
        if node is not self.root and not node.children:
            self._push(node)

    def _push(self, node: _Block) -> None:
        # ``_seq`` keeps heapq off comparing blocks (stale or duplicate entries may share a stamp with a
        # live one); between live leaves it never decides, their stamps being distinct (see ``_evict``).
        self._seq += 1
        heapq.heappush(self._heap, (node.ts, self._seq, node))
        if len(self._heap) > 4 * self.num_nodes + 1024:
            live = [e for e in self._heap if e[2].alive and not e[2].children and e[2].ts == e[0]]
            heapq.heapify(live)
            self._heap = live

    def _match(self, seq: bytes, end: int) -> tuple[int, int]:
        """Return (reused tokens, nodes accessed including the root) for ``seq[:end]`` (bytes)."""
        w = TOKEN_BYTES
        bb = self.block_size * w
        node = self.root
        node.ts = self.clock
        pos = 0
        accessed = 1
        while node.children and pos < end:
            if end - pos >= bb:
                child = node.children.get(seq[pos : pos + bb])
                if child is not None:
                    accessed += 1
                    node = child
                    self._touch(node)
                    pos += bb
                    continue
            for c in node.by_first.get(seq[pos : pos + w], ()):
                lc = len(c.key)
                if lc < bb and seq.startswith(c.key, pos, end):
                    return (pos + lc) // w, accessed + 1  # a partial block ends the walk, unstamped
            break
        return pos // w, accessed

    def _insert(self, seq: bytes) -> None:
        w = TOKEN_BYTES
        bb = self.block_size * w
        node = self.root
        pos = 0
        n = len(seq)
        while True:
            self._touch(node)
            if node.children and pos < n:
                child = node.children.get(seq[pos : pos + bb]) if n - pos >= bb else None
                if child is None:
                    group = node.by_first.get(seq[pos : pos + w], ())
                    lcps = [common_prefix_len(c.key, seq, pos // w, n // w) for c in group]
                    best = max(lcps, default=0)
                    # Marconi descends only into the first child matched whole by the longest prefix.
                    whole = (c for c, k in zip(group, lcps, strict=True) if k == best and len(c.key) == best * w)
                    child = next(whole, None) if best else None
                if child is not None:
                    pos += len(child.key)
                    node = child
                    continue
            if pos == n:
                return
            if node is self.root or len(node.key) == bb:
                self._append_blocks(node, seq, pos)
                return
            # A partial last block is filled in place; Marconi re-keys it, moving it last.
            parent = node.parent
            assert parent is not None and not node.children
            add = seq[pos : pos + bb - len(node.key)]
            del parent.children[node.key]
            group = parent.by_first[node.key[:w]]
            group.remove(node)
            group.append(node)
            node.key = node.key + add
            parent.children[node.key] = node
            self.num_tokens += len(add) // w
            pos += len(add)

    def _append_blocks(self, node: _Block, seq: bytes, pos: int) -> None:
        """Open blocks for ``seq[pos:]`` below ``node``, all stamped now; only the last is a leaf,
        so only it enters the LRU heap (an inner block's entry would be stale at once)."""
        w = TOKEN_BYTES
        bb = self.block_size * w
        now = self.clock
        added = 0
        self.num_tokens += (len(seq) - pos) // w
        while pos < len(seq):
            key = seq[pos : pos + bb]
            block = _Block(key, node, now)
            node.children[key] = block
            node.by_first.setdefault(key[:w], []).append(block)
            added += 1
            pos += len(key)
            node = block
        self.num_nodes += added
        self.states_admitted += added
        self._push(node)

    def _evict(self, bytes_to_remove: float) -> None:
        # Marconi's RadixCache.evict (radix_cache_vllm.py:395-414 at 0801661,
        # https://github.com/ruipeterpan/marconi/blob/0801661/radix_cache_vllm.py#L395-L414) heapifies the
        # DFS-preorder leaves (_collect_leaves, L325-336) on the stamp alone (TreeNode.__lt__, L66-67) at each
        # eviction and pushes a parent left childless (L413-414); we keep one lazy heap across evictions with
        # equal stamps in push order. The victims cannot differ: no two live leaves share a stamp. Each tick
        # stamps one root-down chain: a lookup's (match_prefix L212-213) the full blocks it descends
        # (_match_prefix_helper L296-299, L307-313; the partial child returned at L317-322 is not stamped); an
        # admit's tick (insert L136-137) its speculative match, then, if it evicts (L396-397, which stamps
        # nothing), the insert's walk gets the later tick; otherwise that walk (_insert_helper L243-247,
        # L264-274, L282-293) shares the tick but descends the same unique full-block children, extending the
        # match's chain. Blocks never change parent, and of a chain only the lowest node can be a leaf. With
        # distinct stamps heapq pops the same minimum whatever its layout (unlike SGLang+, where a split leaves
        # two leaves with one tick: test_marconi_sglang_ties.py). Fuzzed against Marconi's class (block sizes
        # 1-4, ~35k tiny traces): equal hits, never a tied pair of leaves on either side.
        w = TOKEN_BYTES
        self.clock += 1
        freed = 0
        heap = self._heap
        while freed < bytes_to_remove:
            victim = None
            while heap:
                ts, _, nd = heapq.heappop(heap)
                if nd.alive and not nd.children and nd.ts == ts:
                    victim = nd
                    break
            if victim is None:
                return
            edge = len(victim.key) // w
            freed += self.state_bytes + self.kv_per_token * edge
            parent = victim.parent
            assert parent is not None
            del parent.children[victim.key]
            group = parent.by_first[victim.key[:w]]
            group.remove(victim)
            if not group:
                del parent.by_first[victim.key[:w]]
            victim.alive = False
            self.num_nodes -= 1
            self.num_tokens -= edge
            self.states_evicted += 1
            if not parent.children and parent is not self.root:
                self._push(parent)
