"""Where the model's caches live: recurrent states in the reference cache's state slots, KV in rows.

``TensorStatePool`` *is* the reference cache's ``StatePool`` (the tree and the lifecycle allocate,
copy and free its slots) with real tensors behind every slot. The lifecycle labels a slot with the
``StateContent`` (token count + prefix fingerprint) it believes the slot holds; the pool makes the
tensors agree: a copy-on-write copies tensors, a label names either a snapshot the executor took
inside the forward being completed, or a state some slot already holds (the live slot after a
forward, a device slot for a host write-back, a host slot for a load-back). A label nothing can
satisfy is a bug in the bookkeeping and raises instead of serving a wrong state.

KV has no slot identity in the reference cache (its KV pool only counts tokens), so ``KVStore`` keys
each token's keys/values by a rolling hash of the prefix ending at that token. Rows are reused only
while the reference tree or a running request holds that prefix: when rows run out, everything
else is dropped (``live_keys``), so a hit reads KV that an earlier forward computed and the cache
kept — never KV that the tree already evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

from reference_impl.model.model import HybridModel, RecState
from reference_impl.radix.pools import Prefixed, StateContent, StatePool

__all__ = ["KVStore", "StateMaterializationError", "TensorStatePool", "rolling_keys"]


class StateMaterializationError(RuntimeError):
    """The cache labelled a slot with a state no tensor holds: serving it would give wrong logits."""


def rolling_keys(tokens: Sequence[int], keys: list[int], upto: int) -> list[int]:
    """Extend ``keys`` (one per position, each hashing the whole prefix up to it) to ``upto`` positions."""
    h = keys[-1] if keys else 0
    for i in range(len(keys), upto):
        h = hash((h, tokens[i]))
        keys.append(h)
    return keys


class TensorStatePool(StatePool):
    def __init__(self, size: int, model: HybridModel) -> None:
        super().__init__(size)
        self.tensors = model.empty_state(size)  # conv [N, R, K-1, C], ssm [N, R, H, d, d]
        self.held: dict[int, StateContent] = {}  # what each slot's tensors really contain
        self._by_content: dict[StateContent, set[int]] = {}
        self.pending: dict[StateContent, RecState] = {}  # snapshots of the forward being completed
        self.peers: list[TensorStatePool] = []  # the other tier (device <-> host)
        self.stale_cow_source = False  # fault injection: a COW copies some other slot's state
        self.copies = 0  # slot-to-slot tensor copies (COW, donation, tier transfers)

    # ---------------------------------------------------------------- tensor access
    def get(self, slots: Sequence[int]) -> RecState:
        idx = torch.tensor(list(slots), dtype=torch.long)
        return RecState(self.tensors.conv[idx], self.tensors.ssm[idx])

    def put(self, slot: int, state: RecState, content: StateContent) -> None:
        """The executor wrote ``state`` (the result of a forward) into ``slot``."""
        self.tensors.conv[slot] = state.conv
        self.tensors.ssm[slot] = state.ssm
        self._label(slot, content)

    def _label(self, slot: int, content: StateContent | None) -> None:
        old = self.held.pop(slot, None)
        if old is not None:
            self._by_content[old].discard(slot)
            if not self._by_content[old]:
                del self._by_content[old]
        if content is not None:
            self.held[slot] = content
            self._by_content.setdefault(content, set()).add(slot)

    def _copy_from(self, pool: TensorStatePool, src: int, dst: int, content: StateContent) -> None:
        self.tensors.conv[dst] = pool.tensors.conv[src]
        self.tensors.ssm[dst] = pool.tensors.ssm[src]
        self.copies += 1
        self._label(dst, content)

    def holder(self, content: StateContent) -> tuple[TensorStatePool, int] | None:
        for pool in (self, *self.peers):
            slots = pool._by_content.get(content)
            if slots:
                return pool, min(slots)
        return None

    # ---------------------------------------------------------------- StatePool overrides
    def free(self, slot: int) -> None:
        super().free(slot)
        self._label(slot, None)

    def write(self, slot: int, content: StateContent) -> None:
        super().write(slot, content)
        if self.held.get(slot) == content:
            return
        if content.num_tokens == 0:
            self.tensors.conv[slot] = 0.0
            self.tensors.ssm[slot] = 0.0
            self._label(slot, content)
            return
        snap = self.pending.get(content)
        if snap is not None:
            self.put(slot, snap, content)
            return
        found = self.holder(content)
        if found is None:
            raise StateMaterializationError(
                f"state slot {slot} labelled with the state after {content.num_tokens} tokens, which no tensor holds"
            )
        self._copy_from(found[0], found[1], slot, content)

    def write_prefix(self, slot: int, source: Prefixed, n: int) -> None:
        self.write(slot, source.fingerprint(n))  # never deferred: the tensors follow the label at once

    def copy(self, src: int, dst: int) -> None:
        content = self.read(src)
        if content is None:
            return
        StatePool.write(self, dst, content)
        source = self._wrong_source(src, content) if self.stale_cow_source else src
        # Under the fault the label stays right while the tensors are another node's: the
        # bookkeeping cannot see the bug, only the logits can (SGLang #35821's stale COW source).
        self._copy_from(self, source, dst, content)

    def _wrong_source(self, src: int, want: StateContent) -> int:
        others = [
            (c.num_tokens, s) for s, c in self.held.items() if s != src and c != want and c.num_tokens > 0
        ]
        if not others:
            return src
        shorter = [o for o in others if o[0] < want.num_tokens]
        return max(shorter or others)[1]


class KVStore:
    """Per-token keys/values of every attention layer, addressed by the prefix they belong to."""

    def __init__(self, rows: int, row_shape: Sequence[int], live_keys: Callable[[], Iterable[int]]) -> None:
        self.data = torch.zeros(rows, *row_shape)
        self.index: dict[int, int] = {}
        self._free = list(range(rows - 1, -1, -1))
        self._live_keys = live_keys
        self.collections = 0

    @property
    def used(self) -> int:
        return len(self.index)

    def rows_for(self, keys: Sequence[int]) -> list[int]:
        try:
            return [self.index[k] for k in keys]
        except KeyError:
            raise StateMaterializationError("a cache hit needs KV that no row holds") from None

    def gather(self, rows: Sequence[int]) -> Tensor:
        return self.data[torch.tensor(list(rows), dtype=torch.long)]

    def store(self, keys: Sequence[int], values: Tensor) -> list[int]:
        """Write the KV of ``keys`` (one row each); returns their rows."""
        rows = []
        for k in keys:
            row = self.index.get(k)
            if row is None:
                if not self._free:
                    self.collect()
                if not self._free:
                    raise MemoryError(f"KV store full: {len(self.index)} rows live")
                row = self._free.pop()
                self.index[k] = row
            rows.append(row)
        self.data[torch.tensor(rows, dtype=torch.long)] = values
        return rows

    def collect(self) -> None:
        """Drop every row neither the tree nor a running request holds."""
        live = set(self._live_keys())
        self.collections += 1
        for k in [k for k in self.index if k not in live]:
            self._free.append(self.index.pop(k))
