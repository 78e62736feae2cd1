"""Finite device pools: KV tokens (counted) and recurrent-state slots (identified).

KV slots are interchangeable, so the KV pool only counts them. State slots carry content — an
``(num_tokens, fingerprint)`` pair naming the prefix the state summarises — so tests can prove that a
copy-on-write hands a request exactly the state of the prefix it matched.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KVPool", "PoolExhausted", "StateContent", "StatePool"]


class PoolExhausted(RuntimeError):
    """Raised where SGLang asserts (e.g. "Can not alloc mamba cache"); callers evict first."""


@dataclass(frozen=True, slots=True)
class StateContent:
    num_tokens: int
    fingerprint: int


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
        self.content: dict[int, StateContent] = {}

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
        self.content.pop(slot, None)
        self._free.append(slot)

    def write(self, slot: int, content: StateContent) -> None:
        if slot not in self._in_use:
            raise ValueError(f"write to unallocated state slot {slot}")
        self.content[slot] = content

    def copy(self, src: int, dst: int) -> None:
        """Copy-on-write: the request's slot gets the cached state's content."""
        if src in self.content:
            self.write(dst, self.content[src])

    def is_allocated(self, slot: int) -> bool:
        return slot in self._in_use
