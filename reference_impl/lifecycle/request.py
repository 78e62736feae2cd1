"""What the cache lifecycle tracks per request, and the checkable content of a recurrent state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reference_impl.radix.pools import StateContent
from reference_impl.radix.results import LockHandle

__all__ = ["STATES_PER_REQUEST_WITH_CACHE", "CachedRequest", "LifecycleCounters", "fingerprint"]

# SGLang mem_cache/common.py: MAMBA_STATE_PER_REQ_PREFIX_CACHE; 0.5.9's and 0.5.16's alloc_req_slots evict states
# until this many per request of the extend batch are free (https://github.com/sgl-project/sglang; #38151).
STATES_PER_REQUEST_WITH_CACHE = 3


# A fingerprint chains the hashes of 256-token blocks, so a request that grows by one decode token
# re-hashes at most one block instead of its whole sequence (which made decode quadratic in length).
_BLOCK = 256


def _extend_chain(tokens: Sequence[int], blocks: int, chain: list[int], head: tuple[int, ...] = ()) -> None:
    """Grow ``chain`` (``chain[k]``: the hash of the first ``k`` full blocks) to ``blocks`` + 1 entries.

    ``head``: a tuple equal to ``tokens[:len(head)]``; blocks inside it are sliced from it (one copy, not a
    list slice and then a tuple of it). The hashes are the same either way: equal tuples hash equal."""
    done = len(chain) - 1
    if done >= blocks:
        return
    h, append = chain[-1], chain.append
    inside = min(blocks, len(head) // _BLOCK)
    for start in range(done * _BLOCK, inside * _BLOCK, _BLOCK):  # the hot loop: a whole input, per request
        h = hash((h, head[start:start + _BLOCK]))
        append(h)
    for start in range(max(done, inside) * _BLOCK, blocks * _BLOCK, _BLOCK):
        h = hash((h, tuple(tokens[start:start + _BLOCK])))
        append(h)


def _content(chain: list[int], tokens: Sequence[int], n: int, head: tuple[int, ...] = ()) -> StateContent:
    blocks = n // _BLOCK
    tail = head[blocks * _BLOCK:n] if n <= len(head) else tuple(tokens[blocks * _BLOCK:n])
    return StateContent(n, hash((chain[blocks], n, tail)))


def fingerprint(tokens: Sequence[int], n: int) -> StateContent:
    """What a recurrent state after ``tokens[:n]`` summarises, as checkable content."""
    chain = [0]
    _extend_chain(tokens, n // _BLOCK, chain)
    return _content(chain, tokens, n)


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
    overwritten_at: int | None = None  # extra_buffer_lazy: kv_len when a decode track wrote over the only slot
    match_limit: int = 0  # the longest prefix the match could reuse (a host tier's load-back goes up to it)
    block_hashes: list[int] = field(default_factory=lambda: [0], repr=False)  # fingerprint's chain, kept
    # The input as a tuple (the caller's own, when it passed one): hashing and tree keys slice it directly.
    input_tuple: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, input_tokens: Sequence[int]) -> CachedRequest:
        """A request for ``input_tokens`` (a tuple is kept as ``input_tuple`` without a copy)."""
        head = tuple(input_tokens)
        return cls(list(head), len(head), input_tuple=head)

    def prefix(self, n: int) -> Sequence[int]:
        """``tokens[:n]``, as a tuple slice of the input when it lies inside it (the tree takes it uncopied)."""
        head = self.input_tuple
        if n <= len(head):
            return head[:n]  # the whole input is the input itself: no copy
        # Past the input (a finished request's key): one concatenation, not a list slice the tree re-tuples.
        return head + tuple(self.tokens[len(head):n])

    def fingerprint(self, n: int) -> StateContent:
        """``fingerprint(self.tokens, n)``, reusing the block hashes of earlier calls (tokens only grow)."""
        if n > len(self.tokens):
            return fingerprint(self.tokens, n)  # blocks past the end would be cached half-filled
        _extend_chain(self.tokens, n // _BLOCK, self.block_hashes, self.input_tuple)
        return _content(self.block_hashes, self.tokens, n, self.input_tuple)

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
    in_place_tracks: int = 0  # extra_buffer_lazy: a decode boundary without a second slot wrote over the one
    # Device-side copies of a whole recurrent state (conv + SSM): a hit's copy-on-write, no_buffer's
    # checkpoint of the live state after a chunk, extra_buffer's track write. A cost model charges them.
    state_copies: int = 0
