"""TokenSpeed's host tiers (``tokenspeed-scheduler`` 0.1.0 with ``--enable-mamba-l2``): write-back and release.

Read from its source (lightseekorg/tokenspeed at 7adcc9ce, the 0.1.0 wheel's era: ``fsm/forward_events.cpp``,
``resource/kv_prefix_cache/kv_prefix_cache.cpp``, ``resource/hybrid_prefix_cache/hybrid_prefix_cache.cpp``) and
checked against the real scheduler (tests/tokenspeed/test_scheduler_oracle.py). TokenSpeed keeps one tree whose
nodes hold device and host copies; the reference keeps the device tree and ``HostTier``'s host tree, and this
module moves what the scheduler moves between them:

* a finished request whose device path is deeper than its host path writes the KV of every node the host lacks
  to the host, and the states of those nodes only (forward_events.cpp:424-447: ``NodesWithout<Host>``, then
  ``PrepareMambaHostWriteBack`` over the same nodes): a state under KV the host already has stays on the device;
* once the write-back is done, the device copies the host now holds are released from the leaf up, while a node
  is unlocked and has no device child (kv_prefix_cache.cpp:356-384 ``ReleaseDeviceResourcesPresentOnHost``),
  each node's device state going too where the host has it (hybrid_prefix_cache.cpp:579 ``OnKVDeviceDemote``).
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.lifecycle.tokenspeed_pool import StateLeaves
from reference_impl.lifecycle.tokenspeed_walk import ts_insert
from reference_impl.radix.key import child_key, match_len
from reference_impl.radix.node import Node
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["host_path", "release_written", "write_kv"]


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


def write_kv(host: MambaRadixTree, tokens: Sequence[int]) -> bool:
    """Copy ``tokens``' KV (page-aligned) to the host, evicting host LRU leaves for room; False if it cannot
    (the scheduler then finishes the request without a write-back: forward_events.cpp:431)."""
    have, _ = host_path(host, tokens)
    need = len(tokens) - have
    if need <= 0:
        return True
    if host.kv_pool.available < need:
        host.evict(num_tokens=need - host.kv_pool.available)
        have, _ = host_path(host, tokens)
        need = len(tokens) - have
        if host.kv_pool.available < need:
            return False
    assert host.kv_pool.alloc(need)
    ts_insert(host, tokens, None, have)
    return True


def _drop_state(tree: MambaRadixTree, leaves: StateLeaves, node: Node) -> None:
    tree._tombstone(node)
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
        tree._evict_leaf(node)
        leaves.nodes.pop(node.id, None)
        leaves.update(tree, parent)
        node = parent
    return released
