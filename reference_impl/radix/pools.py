"""Finite device pools: KV tokens (counted) and recurrent-state slots (identified).

KV slots are interchangeable, so the KV pool only counts them. State slots carry content — an
``(num_tokens, fingerprint)`` pair naming the prefix the state summarises — so tests can prove that a
copy-on-write hands a request exactly the state of the prefix it matched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

__all__ = ["KVPool", "PoolExhausted", "Prefixed", "StateContent", "StatePool"]


class PoolExhausted(RuntimeError):
    """Raised where SGLang asserts (e.g. "Can not alloc mamba cache"); callers evict first."""


@dataclass(frozen=True, slots=True)
class StateContent:
    num_tokens: int
    fingerprint: int


class Prefixed(Protocol):
    """What a deferred write names: a sequence whose first ``n`` tokens never change once written
    (``lifecycle.CachedRequest``: its tokens only grow)."""

    def fingerprint(self, n: int) -> StateContent: ...


class KVPool:
    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"KV pool size must be positive, got {size}")
        self.size = size
        self.available = size

    def alloc(self, n: int) -> bool:
        if n < 0:
            raise ValueError("negative KV allocation")
        if n > self.available:
            return False
        self.available -= n
        return True

    def free(self, n: int) -> None:
        if n < 0 or self.available + n > self.size:
            raise ValueError(f"freeing {n} KV tokens would exceed the pool ({self.available}/{self.size})")
        self.available += n


class StatePool:
    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"state pool size must be positive, got {size}")
        self.size = size
        # Free slots are lazy: slots never handed out are [_fresh, size), released ones a stack. A list of every
        # slot made memory and start-up grow with the capacity asked for (1e16 bytes: 7 GB, 20 s).
        self._fresh = 0
        self._free: list[int] = []  # released slots, reused last-freed first
        self._in_use: set[int] = set()
        self._known: dict[int, StateContent] = {}
        # Slots written by ``write_prefix``, their content computed when first read: a decoding request's live
        # state is rewritten every step and read rarely (a copy, a host write-back), and its fingerprint was a
        # sixth of a GPU-scale forecast. An entry here shadows ``_known``.
        self._deferred: dict[int, tuple[Prefixed, int]] = {}

    @property
    def available(self) -> int:
        return len(self._free) + self.size - self._fresh

    def alloc(self) -> int | None:
        if self._free:
            slot = self._free.pop()
        elif self._fresh < self.size:
            slot = self._fresh  # slot 0 first, as SGLang's free list hands them out
            self._fresh += 1
        else:
            return None
        self._in_use.add(slot)
        return slot

    def free(self, slot: int) -> None:
        if slot not in self._in_use:
            raise ValueError(f"state slot {slot} is not allocated (double free?)")
        self._in_use.remove(slot)
        self._known.pop(slot, None)
        self._deferred.pop(slot, None)
        self._free.append(slot)

    def write(self, slot: int, content: StateContent) -> None:
        if slot not in self._in_use:
            raise ValueError(f"write to unallocated state slot {slot}")
        self._known[slot] = content
        self._deferred.pop(slot, None)

    def write_prefix(self, slot: int, source: Prefixed, n: int) -> None:
        """``write(slot, source.fingerprint(n))``, the fingerprint computed only if the slot is read before it is
        written again or freed. ``n`` is kept, not read from ``source`` later: the state is the one after ``n``."""
        if slot not in self._in_use:
            raise ValueError(f"write to unallocated state slot {slot}")
        self._deferred[slot] = (source, n)

    def read(self, slot: int | None) -> StateContent | None:
        """What ``slot`` holds (None: never written since it was allocated, or no slot)."""
        if slot is None:
            return None
        deferred = self._deferred.pop(slot, None)
        if deferred is not None:
            source, n = deferred
            content = self._known[slot] = source.fingerprint(n)
            return content
        return self._known.get(slot)

    @property
    def content(self) -> Mapping[int, StateContent]:
        """Every written slot's content, the deferred ones computed now (a whole-pool view: tests, comparisons)."""
        for slot in list(self._deferred):
            self.read(slot)
        return MappingProxyType(self._known)

    def copy(self, src: int, dst: int) -> None:
        """Copy-on-write: the request's slot gets the cached state's content."""
        content = self.read(src)
        if content is not None:
            self.write(dst, content)

    def is_allocated(self, slot: int) -> bool:
        return slot in self._in_use
