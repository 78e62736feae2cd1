"""TokenSpeed's host tiers (``tokenspeed-scheduler`` 0.1.0 with ``--enable-mamba-l2``): one tree over two tiers.

Read from its source (lightseekorg/tokenspeed at 7adcc9ce, the 0.1.0 wheel's era: ``fsm/forward_events.cpp``,
``resource/kv_prefix_cache/``, ``resource/hybrid_prefix_cache/hybrid_prefix_cache.cpp``) and checked against the
real scheduler (tests/tokenspeed/test_scheduler_oracle.py). TokenSpeed keeps one tree whose nodes hold device and
host copies, with one access time each; the reference keeps the device tree and ``HostTier``'s host tree, and
this module makes the host tree behave as the host half of that one tree:

* every device walk is walked again on the host tree with the same tick (``mirror_walk``): the same splits,
  the same times, so the host's LRU orders are the one tree's;
* a finished request whose device path is deeper than its host path writes the KV of every node the host lacks
  to the host, node by node, and the states of those nodes only, all or none (forward_events.cpp:403-428:
  ``NodesWithout<Host>``, then ``PrepareMambaHostWriteBack``): a state under KV the host already has stays on
  the device; room is made by evicting LRU host leaves with their states, then the oldest host states;
* once the write-back is done, the device copies the host now holds are released from the leaf up, while a node
  is unlocked and has no device child (kv_prefix_cache.cpp:356-386 ``ReleaseDeviceResourcesPresentOnHost``),
  each node's device state going too where the host has it (hybrid_prefix_cache.cpp:579 ``OnKVDeviceDemote``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle.tokenspeed_pool import StateLeaves
from reference_impl.lifecycle.tokenspeed_walk import _walk
from reference_impl.radix.key import child_key, match_len, page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.pools import StateContent
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["host_path", "host_state", "mirror_walk", "release_written", "write_back_path"]


def host_path(host: MambaRadixTree, tokens: Sequence[int]) -> tuple[int, frozenset[int]]:
    """The host's KV match of ``tokens`` and the depths on it that hold a host state (nothing is stamped)."""
    ps = host.page_size
    node, pos, states = host.root, 0, set()
    while pos < len(tokens):
        child = node.children.get(child_key(tokens, pos, ps))
        if child is None:
            break
        m = match_len(child.key, tokens, pos, ps)
        pos += m
        if m < len(child.key):
            break
        if child.state is not None:
            states.add(pos)
        node = child
    return pos, frozenset(states)


def host_state(host: MambaRadixTree, tokens: Sequence[int]) -> tuple[int, StateContent | None]:
    """The deepest host state on ``tokens``' host path and its content (``FindLastMambaHostNode``)."""
    nodes = [n for n in _host_nodes(host, tokens) if n.state is not None]
    if not nodes:
        return 0, None
    return nodes[-1].depth, host.state_pool.read(nodes[-1].state)


def mirror_walk(host: MambaRadixTree, tokens: Sequence[int], tick: int) -> None:
    """A device walk in TokenSpeed walks its one tree, host-only nodes too: the host tree is split and stamped
    along the same page-aligned tokens with the device walk's time (radix_tree.cpp:134-194)."""
    _walk(host, tuple(tokens[: page_floor(len(tokens), host.page_size)]), tick)


def _host_nodes(host: MambaRadixTree, tokens: Sequence[int]) -> list[Node]:
    """The host nodes wholly on ``tokens``' path, root first."""
    ps = host.page_size
    node, pos, out = host.root, 0, []
    while pos < len(tokens):
        child = node.children.get(child_key(tokens, pos, ps))
        if child is None or match_len(child.key, tokens, pos, ps) < len(child.key):
            break
        pos += len(child.key)
        out.append(child)
        node = child
    return out


def _evict_host_kv(host: MambaRadixTree, need: int, keep: set[int]) -> bool:
    """``EnsureCapacityByEvict<Host>``: LRU host leaves go whole, with their host states (eviction.h:119-173,
    hybrid_prefix_cache.cpp:507 ``OnKVHostEvict``), the path being written back kept (its host lock)."""
    while host.kv_pool.available < need:
        leaves = [n for n in host.nodes.values() if not n.children and n.id not in keep and n is not host.root]
        if not leaves:
            return False
        leaf = min(leaves, key=lambda n: (n.kv_tick, n.id))
        tokens, _ = host._evict_leaf(leaf)
        host.tokens_evicted_total += tokens
    return True


def _evict_host_states(host: MambaRadixTree, need: int, keep: set[int]) -> bool:
    """``EnsureMambaHostCapacityByEvict``: the oldest host states of any node, leaf or not, off the locked path
    (hybrid_prefix_cache.cpp:219-269)."""
    pool = host.state_pool
    if pool.available >= need:
        return True
    stateful = sorted((n for n in host.nodes.values() if n.state is not None and n.id not in keep),
                      key=lambda n: (n.kv_tick, n.id))
    for node in stateful:
        if pool.available >= need:
            break
        host._tombstone(node)
        host.states_evicted_total += 1
    return pool.available >= need


def write_back_path(host: HostTier, tokens: Sequence[int], path: list[Node], tick: int,
                    content: Callable[[int], StateContent]) -> bool:
    """``FinishEvent`` with the host tier on (forward_events.cpp:403-428): room for the KV of the device path's
    nodes the host lacks (else no write-back at all), that KV node by node, then the states of those nodes only,
    all or none (``PrepareMambaHostWriteBack``). ``path``: the device nodes, root first, ending at ``tokens``'
    end. False when nothing was written."""
    tree = host.tree
    have, _ = host_path(tree, tokens)
    if len(tokens) <= have:
        return False
    keep = {n.id for n in _host_nodes(tree, tokens[:have])}
    if not _evict_host_kv(tree, len(tokens) - have, keep):
        host.counters.write_back_failures += 1
        return False
    ps = tree.page_size
    prev = have
    for node in path:
        if node.depth <= prev:
            continue
        parent = _host_nodes(tree, tokens[:prev])
        at = parent[-1] if parent else tree.root
        allocated = tree.kv_pool.alloc(node.depth - prev)  # room was made above: never short here
        assert allocated
        leaf = tree._new_node(tuple(tokens[prev:node.depth]), at, node.depth)
        at.children[child_key(leaf.key, 0, ps)] = leaf
        leaf.kv_tick = leaf.state_tick = tick
        tree.kv_evictable += len(leaf.key)
        tree._refresh_candidacy(leaf)
        tree._refresh_candidacy(at)
        prev = node.depth
    host.counters.write_backs += 1
    host.counters.write_back_tokens += len(tokens) - have
    written = [n.depth for n in path if n.depth > have and n.state is not None]
    keep = {n.id for n in _host_nodes(tree, tokens)}
    if written and _evict_host_states(tree, len(written), keep):
        by_depth = {n.depth: n for n in _host_nodes(tree, tokens)}
        for depth in written:
            slot = tree.state_pool.alloc()
            assert slot is not None
            tree.state_pool.write(slot, content(depth))
            node = by_depth[depth]
            node.state = slot
            tree.state_evictable += 1
            tree._refresh_candidacy(node)
    return True


def _drop_state(tree: MambaRadixTree, leaves: StateLeaves, node: Node) -> None:
    tree._tombstone(node)
    tree.states_evicted_total += 1
    leaves.nodes.pop(node.id, None)
    leaves.update(tree, node.parent)


def release_written(tree: MambaRadixTree, leaves: StateLeaves, host: MambaRadixTree, tokens: Sequence[int],
                    leaf: Node) -> int:
    """``ReleaseDeviceResourcesPresentOnHost`` from ``leaf`` (the end of ``tokens`` on the device): returns the
    KV tokens released. A released node's state not on the host is dropped with it (the scheduler keeps it, on a
    node no device match can reach until its KV is back)."""
    on_host, host_states = host_path(host, tokens[: leaf.depth])
    released = 0
    node = leaf
    while node is not tree.root:
        if node.depth > on_host or node.kv_lock:
            break
        if node.state is not None and node.state_lock == 0 and node.depth in host_states:
            _drop_state(tree, leaves, node)
        if node.children:
            break
        parent = node.parent
        assert parent is not None
        released += len(node.key)
        tokens_freed, states_freed = tree._evict_leaf(node)
        # Counted as evicted: the scheduler reports a release as it reports an eviction, a device block removed
        # (kv_prefix_cache.cpp:377 and :349), and what the host holds must now be loaded back.
        tree.tokens_evicted_total += tokens_freed
        tree.states_evicted_total += states_freed
        leaves.nodes.pop(node.id, None)
        leaves.update(tree, parent)
        node = parent
    return released
