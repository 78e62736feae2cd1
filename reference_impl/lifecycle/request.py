"""What the cache lifecycle tracks per request, and the checkable content of a recurrent state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reference_impl.radix.pools import StateContent
from reference_impl.radix.results import LockHandle

__all__ = ["STATES_PER_REQUEST_WITH_CACHE", "CachedRequest", "LifecycleCounters", "fingerprint"]

# SGLang mem_cache/common.py: MAMBA_STATE_PER_REQ_PREFIX_CACHE; alloc_req_slots evicts states until
# this many per admitted request are free (research/sglang.md §1.7; over-eviction is #38151).
STATES_PER_REQUEST_WITH_CACHE = 3


def fingerprint(tokens: Sequence[int], n: int) -> StateContent:
    """What a recurrent state after ``tokens[:n]`` summarises, as checkable content."""
    return StateContent(n, hash(tuple(tokens[:n])))


@dataclass(slots=True)
class CachedRequest:
    """One request as the cache sees it. ``tokens`` grows from the input as decode appends output."""

    tokens: list[int]
    input_len: int
    lock: LockHandle | None = None
    prefix_len: int = 0  # cached tokens reported at admission (SGLang's cached_tokens)
    protected_len: int = 0  # tokens shared with the tree (cache_protected_len)
    kv_len: int = 0  # tokens with KV (tree-shared + request-held)
    kv_reserved: int = 0  # KV allocated ahead for the next decode step (scheduler's out_cache_loc)
    live_state: int | None = None
    track_slots: list[int] = field(default_factory=list)
    track_seqlen: int | None = None  # position of the newest tracked, not yet inserted state
    branch_seqlen: int | None = None

    @property
    def held_kv(self) -> int:
        return self.kv_len - self.protected_len + self.kv_reserved

    def held_states(self) -> list[int]:
        live = [] if self.live_state is None else [self.live_state]
        return live + self.track_slots


@dataclass(slots=True)
class LifecycleCounters:
    states_inserted: int = 0  # states handed to the tree (including ones it already had)
    states_duplicate: int = 0  # inserts that found a state already there
    state_alloc_failures: int = 0  # a chunk checkpoint skipped because no state slot could be freed
