"""Marconi's hybrid radix tree: one edge of tokens and one SSM checkpoint per non-root node.

Contract (Marconi, arXiv 2411.19379):

* Every non-root node owns the KVs of its edge and one recurrent-state checkpoint taken at the
  edge's last token; the tree costs ``num_nodes · state_bytes + num_tokens · kv_bytes_per_token``.
* :meth:`HybridTree.match` reuses only whole edges; :meth:`HybridTree.insert` splits an edge at a
  branch point (the split node is the branch-point checkpoint) and appends one leaf.
* Children are kept in a ``dict`` keyed by the first token of their edge, in the same insertion
  order Marconi's simulator has (replacing a child keeps its slot), so a preorder walk visits
  nodes in the same order as Marconi's DFS; :meth:`preorder_key` recovers that order on demand.
* Two optional indexes replace Marconi's per-eviction DFS: the eviction *candidates* (non-root
  nodes with ≤1 child) in flat arrays with a cached FLOP efficiency, and a lazy min-heap of
  leaves by timestamp. Both are updated in O(1) by every structural change.
* Token sequences are packed with :func:`pack` (4 native-endian bytes per id, ids < 2³²) so
  an edge comparison is one ``memcmp`` in place (``bytes.startswith`` with bounds, no slice
  copied); positions and lengths in the API are in tokens. A request is packed once, input and
  output together (:func:`pack_request`); its input is the prefix ``end`` tokens long.
* No clock here: callers pass ``now``. Nothing is ever stored but token ids.
"""

from __future__ import annotations

import copy
import heapq
from array import array
from collections.abc import Iterable, Sequence

from reference_impl.models import ModelSpec

__all__ = ["TOKEN_BYTES", "HybridTree", "Node", "common_prefix_len", "pack", "pack_request"]

_CODE = "I" if array("I").itemsize == 4 else "L"
TOKEN_BYTES = 4
_FIRST_WINDOW = 64 * TOKEN_BYTES


def pack(tokens: Iterable[int]) -> bytes:
    """Token ids as a byte string of fixed-width items; raises OverflowError for ids ≥ 2³²."""
    if getattr(tokens, "typecode", None) == "i" and array("i").itemsize == TOKEN_BYTES:
        # A trace row's TokenIds: non-negative int32 ids, the same bytes as uint32; one copy, no int objects.
        packed: bytes = tokens.tobytes()  # type: ignore[attr-defined]
        return packed
    return array(_CODE, tokens).tobytes()


class Node:
    """A radix node. ``depth`` is the number of tokens root→end of this edge (Marconi's L_tot)."""

    __slots__ = ("alive", "children", "cidx", "depth", "eff", "key", "parent", "ts")

    def __init__(self, key: bytes, parent: Node | None, ts: int, depth: int) -> None:
        self.key = key  # packed edge tokens
        self.parent = parent
        self.children: dict[bytes, Node] = {}  # keyed by the packed first token of the child edge
        self.ts = ts
        self.depth = depth
        self.eff = 0.0
        self.cidx = -1  # position in the candidate arrays, -1 when not a candidate
        self.alive = True

    def __lt__(self, other: Node) -> bool:
        # Marconi's TreeNode.__lt__: timestamps only, so heapq leaves equal stamps in its own sift order
        # (https://github.com/ruipeterpan/marconi/blob/0801661/radix_cache_hybrid.py, TreeNode.__lt__).
        return self.ts < other.ts


def pack_request(input_tokens: Sequence[int], output_tokens: Iterable[int]) -> tuple[bytes, int]:
    """``(input + output packed, len(input))``: what the packed cache API takes."""
    return pack(input_tokens) + pack(output_tokens), len(input_tokens)


def common_prefix_len(edge: bytes, seq: bytes, start: int, end: int) -> int:
    """Tokens in the common prefix of packed ``edge`` and packed ``seq`` tokens ``start:end``.

    A whole edge that matches costs one in-place ``memcmp``. Otherwise windows growing 8× at a
    time are compared in place until one differs (divergences are usually near an edge's start);
    in that window the first differing byte is the lowest set bit of the two windows read as
    little-endian integers and XORed.
    """
    w = TOKEN_BYTES
    s = start * w
    if seq.startswith(edge, s, end * w):
        return len(edge) // w
    m = min(len(edge), (end - start) * w)
    view = memoryview(edge)
    lo, step = 0, _FIRST_WINDOW
    while lo < m:
        hi = min(lo + step, m)
        window = view[lo:hi]
        if not seq.startswith(window, s + lo):
            diff = int.from_bytes(window, "little") ^ int.from_bytes(seq[s + lo : s + hi], "little")
            return (lo + ((diff & -diff).bit_length() - 1) // 8) // w
        lo = hi
        step *= 8
    return m // w


class HybridTree:
    """The tree plus the bookkeeping eviction policies need; policies live in the caches."""

    def __init__(self, model: ModelSpec, *, candidates: bool, leaf_heap: bool, mlp_bug: bool) -> None:
        self.model = model
        self.root = Node(b"", None, 0, 0)
        self.num_nodes = 0
        self.num_tokens = 0
        self.state_bytes = model.state_bytes()
        self.kv_per_token = model.kv_bytes_per_token()
        self.states_admitted = 0
        self.states_evicted = 0
        self._track_cands = candidates
        self._track_leaves = leaf_heap
        self._mlp_bug = mlp_bug  # Marconi's MLP term subtracts F_attn(L_par) (a quirk of Marconi's published simulator)
        self.cands: list[Node] = []
        self.effs: list[float] = []
        self.tss: list[int] = []
        self._heap: list[tuple[int, int, Node]] = []
        self._seq = 0

    def size_bytes(self) -> int:
        return self.num_nodes * self.state_bytes + self.num_tokens * self.kv_per_token

    # -- lookup / insert ----------------------------------------------------------------------
    def match(
        self, seq: bytes, now: int, *, refresh_all: bool, phantom: bool, end: int | None = None
    ) -> tuple[int, int, Node]:
        """Return ``(reusable_len, lcp_len, deepest_fully_matched_node)`` for ``seq[:end]`` (tokens).

        ``phantom=True`` reproduces Marconi's walk, which after a partially matched edge keeps
        descending into that child's children with the unmatched remainder (a child whose first
        token equals the next request token is then "matched" although the path diverged).
        ``refresh_all`` stamps every visited node (SGLang+ rule).
        """
        w = TOKEN_BYTES
        node = self.root
        pos = 0
        n = len(seq) // w if end is None else end
        reused = 0
        lcp = 0
        deepest = node
        while pos < n:
            child = node.children.get(seq[pos * w : pos * w + w])
            if child is None:
                break
            k = common_prefix_len(child.key, seq, pos, n)
            lcp += k
            if refresh_all:
                self.touch(child, now)
            if k * w == len(child.key):
                reused += k
                deepest = child
            elif not phantom:
                break
            node = child
            pos += k
        return reused, lcp, deepest

    def insert(self, seq: bytes, now: int, *, refresh_all: bool) -> None:
        """Insert packed ``seq``: descend whole edges, split at most one edge, append one leaf."""
        w = TOKEN_BYTES
        node = self.root
        pos = 0
        n = len(seq) // w
        while True:
            if refresh_all and node is not self.root:
                self.touch(node, now)
            if pos == n:
                return
            child = node.children.get(seq[pos * w : pos * w + w])
            if child is None:
                self._add_leaf(node, seq[pos * w :], now)
                return
            k = common_prefix_len(child.key, seq, pos, n)
            if k * w == len(child.key):
                if pos + k == n:
                    return  # already cached; Marconi does not stamp this node on insert
                node = child
            else:
                node = self._split(child, k, now)
            pos += k

    def touch(self, node: Node, now: int) -> None:
        node.ts = now
        if node.cidx >= 0:
            self.tss[node.cidx] = now
        if self._track_leaves and not node.children:
            self._push_leaf(node)

    # -- structural changes ---------------------------------------------------------------------
    def _add_leaf(self, parent: Node, key: bytes, now: int) -> Node:
        edge = len(key) // TOKEN_BYTES
        leaf = Node(key, parent, now, parent.depth + edge)
        parent.children[key[:TOKEN_BYTES]] = leaf
        self.num_nodes += 1
        self.num_tokens += edge
        self.states_admitted += 1
        if self._track_cands:
            self._set_eff(leaf)
            self._cand_add(leaf)
            if len(parent.children) == 2 and parent.cidx >= 0:
                self._cand_remove(parent)
        if self._track_leaves:
            self._push_leaf(leaf)
        return leaf

    def _split(self, child: Node, k: int, now: int) -> Node:
        parent = child.parent
        assert parent is not None
        w = TOKEN_BYTES
        top = Node(child.key[: k * w], parent, now, child.depth - len(child.key) // w + k)
        child.key = child.key[k * w :]
        child.parent = top
        top.children[child.key[:w]] = child
        parent.children[top.key[:w]] = top  # same slot as the old child: preorder unchanged
        self.num_nodes += 1
        self.states_admitted += 1
        if self._track_cands:
            self._set_eff(top)
            self._cand_add(top)
            self._set_eff(child)  # its edge shrank, its depth did not
        return top

    def delete_leaf(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.key[:TOKEN_BYTES]]
        node.alive = False
        self.num_nodes -= 1
        self.num_tokens -= len(node.key) // TOKEN_BYTES
        self.states_evicted += 1
        if node.cidx >= 0:
            self._cand_remove(node)
        if parent is not self.root:
            if self._track_cands and len(parent.children) == 1:
                self._cand_add(parent)
            if self._track_leaves and not parent.children:
                self._push_leaf(parent)

    def merge_into_child(self, node: Node) -> Node:
        """Drop ``node``'s checkpoint: its only child absorbs its edge (KVs stay cached)."""
        parent = node.parent
        assert parent is not None and len(node.children) == 1
        (child,) = node.children.values()
        child.key = node.key + child.key
        child.parent = parent
        child.ts = max(node.ts, child.ts)
        parent.children[child.key[:TOKEN_BYTES]] = child  # takes node's slot: same preorder position
        node.alive = False
        self.num_nodes -= 1
        self.states_evicted += 1
        if node.cidx >= 0:
            self._cand_remove(node)
        if self._track_cands:
            self._set_eff(child)
            if child.cidx >= 0:
                self.tss[child.cidx] = child.ts
        return child

    # -- candidate arrays (nodes with ≤1 child) -------------------------------------------------
    def _set_eff(self, node: Node) -> None:
        """Marconi's parent-relative FLOP efficiency; exact ints, one correctly rounded division."""
        m = self.model
        tot = node.depth
        edge = len(node.key) // TOKEN_BYTES
        par = tot - edge
        attn_par = m.attn_layer_flops(par)
        mlp_par = attn_par if self._mlp_bug else m.mlp_layer_flops(par)
        flops = (
            m.num_ssm_layers * m.ssm_layer_flops(edge)
            + m.num_attn_layers * (m.attn_layer_flops(tot) - attn_par)
            + m.num_mlp_layers * (m.mlp_layer_flops(tot) - mlp_par)
        )
        node.eff = flops / (self.state_bytes + self.kv_per_token * tot)
        if node.cidx >= 0:
            self.effs[node.cidx] = node.eff

    def _cand_add(self, node: Node) -> None:
        if node.cidx >= 0:
            return
        node.cidx = len(self.cands)
        self.cands.append(node)
        self.effs.append(node.eff)
        self.tss.append(node.ts)

    def _cand_remove(self, node: Node) -> None:
        i = node.cidx
        last = self.cands.pop()
        e = self.effs.pop()
        t = self.tss.pop()
        if last is not node:  # swap-remove keeps removal O(1); order is recovered by preorder_key
            self.cands[i] = last
            self.effs[i] = e
            self.tss[i] = t
            last.cidx = i
        node.cidx = -1

    def preorder_key(self, node: Node) -> list[int]:
        """Child-slot indices root→node; lists compare in Marconi's DFS (preorder) order."""
        path: list[int] = []
        while node.parent is not None:
            i = 0
            for sib in node.parent.children.values():
                if sib is node:
                    break
                i += 1
            path.append(i)
            node = node.parent
        path.reverse()
        return path

    def leaves_preorder(self) -> list[Node]:
        """Leaves in DFS preorder, the root alone when the tree is empty (Marconi's ``_collect_leaves``)."""
        out: list[Node] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(reversed(node.children.values()))
            else:
                out.append(node)
        return out

    def rightmost_leaf(self) -> Node:
        """The last node of a preorder walk (follow the newest child slot down)."""
        node = self.root
        while node.children:
            node = node.children[next(reversed(node.children))]
        return node

    def clone(self) -> HybridTree:
        """Deep copy that keeps child-slot order, candidate order and heap entries (iterative)."""
        twin = copy.copy(self)
        mapping: dict[int, Node] = {}
        new_root = Node(b"", None, self.root.ts, 0)
        mapping[id(self.root)] = new_root
        stack = [(self.root, new_root)]
        while stack:
            old, new = stack.pop()
            for first, ch in old.children.items():
                nc = Node(ch.key, new, ch.ts, ch.depth)
                nc.eff = ch.eff
                nc.cidx = ch.cidx
                new.children[first] = nc
                mapping[id(ch)] = nc
                stack.append((ch, nc))
        twin.root = new_root
        twin.cands = [mapping[id(c)] for c in self.cands]
        twin.effs = list(self.effs)
        twin.tss = list(self.tss)
        twin._heap = [(t, q, mapping[id(nd)]) for t, q, nd in self._heap if id(nd) in mapping and nd.alive]
        return twin

    # -- leaf LRU heap (lazy: stale entries are skipped when popped) -----------------------------
    def _push_leaf(self, node: Node) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (node.ts, self._seq, node))
        if len(self._heap) > 4 * self.num_nodes + 1024:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        live = [e for e in self._heap if e[2].alive and not e[2].children and e[2].ts == e[0]]
        heapq.heapify(live)
        self._heap = live

    def pop_lru_leaf(self) -> Node | None:
        """Least recently stamped leaf; equal stamps go to the leaf pushed first.

        Leaf stamps can tie: an admit that splits a leaf without evicting stamps the split-off
        remainder (speculative lookup) and the new leaf (insert) with the same clock. Faithful
        SGLang+ eviction therefore does not use this heap (see ``MarconiCache._evict_faithful``).
        """
        heap = self._heap
        while heap:
            ts, _, node = heapq.heappop(heap)
            if node.alive and not node.children and node.ts == ts and node is not self.root:
                return node
        return None
