"""hybridbench's executable specification of hybrid (attention + recurrent state) prefix caching.

Pure Python and deterministic; imports nothing from ``hybridbench``. The public entry points:

* ``MambaRadixTree`` — SGLang's MambaRadixCache semantics over finite KV and state pools;
* ``make_strategy`` — request-level caching (``no_buffer`` / ``extra_buffer``) on such a tree;
* ``HostTier`` — the host (L2) tier;
* ``POLICIES`` / ``make_replay_cache`` — every policy by name, for the trace replayer;
* ``check_invariants`` — the tree's invariants as an executable checker.
"""

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle import STRATEGIES, make_strategy
from reference_impl.policies.registry import POLICIES, make_policy, make_replay_cache
from reference_impl.radix.invariants import InvariantError, check_invariants
from reference_impl.radix.pools import KVPool, PoolExhausted, StatePool
from reference_impl.radix.results import MatchResult
from reference_impl.radix.tree import MambaRadixTree

__all__ = [
    "POLICIES",
    "STRATEGIES",
    "HostTier",
    "InvariantError",
    "KVPool",
    "MambaRadixTree",
    "MatchResult",
    "PoolExhausted",
    "StatePool",
    "check_invariants",
    "make_policy",
    "make_replay_cache",
    "make_strategy",
]
