"""Token keys: page-aligned longest-common-prefix matching on tuples of token ids.

Edges are stored as tuples; a request's tokens are compared against an edge with slice equality in
blocks (C speed) and a short per-token scan only inside the first differing block, so matching a
20K-token edge costs one pass in C rather than 20K Python steps.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["child_key", "match_len", "page_floor"]

_BLOCK = 256

ChildKey = int | tuple[int, ...]


def page_floor(n: int, page_size: int) -> int:
    return n - n % page_size


def child_key(tokens: Sequence[int], start: int, page_size: int) -> ChildKey:
    """The key under which a child edge starting at ``tokens[start]`` hangs (SGLang's ``child_key``)."""
    if page_size == 1:
        return tokens[start]
    return tuple(tokens[start : start + page_size])


def match_len(edge: tuple[int, ...], tokens: Sequence[int], start: int, page_size: int) -> int:
    """Length of the common prefix of ``edge`` and ``tokens[start:]``, rounded down to a page."""
    n = min(len(edge), len(tokens) - start)
    if n <= 0:
        return 0
    if tuple(tokens[start : start + n]) == edge[:n]:
        return page_floor(n, page_size)
    i = 0
    while i < n:
        j = min(i + _BLOCK, n)
        if tuple(tokens[start + i : start + j]) != edge[i:j]:
            while edge[i] == tokens[start + i]:
                i += 1
            return page_floor(i, page_size)
        i = j
    return page_floor(n, page_size)  # pragma: no cover - the fast path above covers full equality
