"""Requests' token ids as tuples that share one int object per id value.

The cache compares and hashes a request's tokens as a tuple of Python ints (``reference_impl.lifecycle``). Made
from a trace row's compact ids one by one, every request holds fresh int objects, so comparing it with an edge of
the tree compares ints value by value, and every id is allocated and freed again. Taken from one table of int
objects instead (a numpy gather, then ``tolist``), equal ids are the same object: a tuple comparison passes each of
them on identity, nothing is allocated per id, and the tuple is built faster than by iterating the ids. Values,
and so every comparison's and hash's result, are the same either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workloads.token_ids import TokenIds

np: Any  # numpy (a dependency of the package); without it, ids are converted one by one as before
try:
    import numpy as _numpy
except ImportError:
    np = None
else:
    np = _numpy

__all__ = ["SharedIds"]

# Ids past this are converted one by one: the table holds an int object (36 bytes) per value below its top.
_TABLE_LIMIT = 1 << 21


class SharedIds:
    def __init__(self) -> None:
        self._table: Any = None  # object array: _table[i] is the int i, the one object every tuple holds for i

    def tuple_of(self, tokens: Sequence[int]) -> tuple[int, ...]:
        if np is None or not isinstance(tokens, TokenIds) or tokens.typecode != "i" or not tokens:
            return tuple(tokens)
        ids = np.frombuffer(tokens.tobytes(), dtype=np.int32)
        top = int(ids.max())
        if top >= _TABLE_LIMIT or int(ids.min()) < 0:
            return tuple(tokens)
        if self._table is None or top >= len(self._table):
            self._grow(top + 1)
        out: tuple[int, ...] = tuple(self._table[ids].tolist())
        return out

    def _grow(self, size: int) -> None:
        """Extend the table, keeping the objects already handed out (they stay the ones equal ids share)."""
        old = 0 if self._table is None else len(self._table)
        size = min(_TABLE_LIMIT, max(size, old + old // 4))
        table = np.empty(size, dtype=object)
        if old:
            table[:old] = self._table
        table[old:] = np.arange(old, size).tolist()
        self._table = table
