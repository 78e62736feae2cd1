"""A request's token ids held compactly: 4 bytes a token (8 past int32), not a tuple of Python ints.

A tuple of ids costs 36 bytes a token (an 8-byte pointer and a 28-byte int); the seglen SWE-bench preset's 44M
ids took 1.6 GB that way. ``TokenIds`` is an immutable sequence over an ``array`` that compares and hashes like
the tuple it replaces, so code written against tuples (slicing, ``==``, ``*`` unpacking, dict keys) keeps working.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, SupportsIndex, overload

from workloads import compiled_scans

__all__ = ["INT32_LIMIT", "SplicedIds", "TokenIds", "as_token_ids", "largest_id", "largest_in"]

INT32_LIMIT = 1 << 31


class TokenIds(Sequence[int]):
    """Immutable token ids; ``==`` and ``hash`` agree with ``tuple`` of the same ids."""

    __slots__ = ("_a",)
    _a: array[int]

    def __init__(self, ids: Iterable[int] = ()) -> None:
        if isinstance(ids, TokenIds):
            self._a = ids._a
            return
        if not isinstance(ids, Sequence):
            ids = list(ids)  # a one-shot iterator: array("i") may consume part of it before an id overflows
        try:
            self._a = array("i", ids)
        except OverflowError:  # an id past int32 (the reader allows int64)
            self._a = array("q", ids)

    @classmethod
    def from_array(cls, values: array[int]) -> TokenIds:
        """Wrap ``values`` without copying; the caller hands it over and never mutates it again."""
        out = cls.__new__(cls)
        out._a = values
        return out

    @classmethod
    def from_uint32(cls, values: array[int]) -> TokenIds:
        """The ids of an ``array("I")`` (as the generators draw them), without a Python int per id: its bytes read as
        int32 when every id fits, else widened to int64, as the constructor would pick (a tuple's round trip cost
        the seglen experiment's plan two thirds of its time)."""
        import numpy as np  # noqa: PLC0415 - imported where used: a trace's first read needs none (trace_fast)

        words = np.frombuffer(values, np.uint32) if values.itemsize == 4 else np.asarray(values, np.uint64)
        out = array("i" if not len(words) or int(words.max()) < INT32_LIMIT else "q")
        out.frombytes(words.astype(np.int32 if out.typecode == "i" else np.int64).tobytes())
        return cls.from_array(out)

    @classmethod
    def join(cls, parts: Sequence[TokenIds]) -> TokenIds:
        """The ids of ``parts`` one after another (``a + b + c`` copies ``a`` twice). The parts' width is kept: parts
        all held as int64 stay int64 even where every id would fit int32, as with ``+``."""
        return cls.splice([(part, 0, len(part)) for part in parts])

    @classmethod
    def splice(cls, pieces: Sequence[tuple[TokenIds, int, int]], *, lazy: bool = False) -> TokenIds:
        """``ids[start:stop]`` of each ``(ids, start, stop)``, one after another, each id copied once (a slice, then
        a concatenation, copies it twice). The width is kept as in ``join``.

        ``lazy``: nothing is copied until the ids are needed whole (``SplicedIds``); the trace reader's later turns."""
        if not pieces:
            return cls()
        code = pieces[0][0].typecode
        if any(ids.typecode != code for ids, _, _ in pieces):
            return TokenIds([i for ids, start, stop in pieces for i in ids._a[start:stop]])  # the constructor picks
        if lazy:
            return SplicedIds(code, [part for ids, start, stop in pieces for part in _parts_of(ids, start, stop)])
        out = array(code)
        for ids, start, stop in pieces:
            out.frombytes(memoryview(ids._a)[start:stop].cast("B"))
        return cls.from_array(out)

    def __len__(self) -> int:
        return len(self._a)

    @overload
    def __getitem__(self, index: SupportsIndex) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> TokenIds: ...
    def __getitem__(self, index: SupportsIndex | slice) -> int | TokenIds:
        if isinstance(index, slice):
            return TokenIds.from_array(self._a[index])
        return self._a[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._a)

    def __add__(self, other: Sequence[int]) -> TokenIds:
        """Concatenation, as with tuples (``input_tokens + output_tokens`` is the sequence a request leaves)."""
        if isinstance(other, TokenIds) and other._a.typecode == self._a.typecode:
            return TokenIds.from_array(self._a + other._a)
        return TokenIds([*self._a, *other])

    def __radd__(self, other: Sequence[int]) -> TokenIds:
        return TokenIds([*other, *self._a])

    def __contains__(self, value: object) -> bool:
        return value in self._a

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenIds):
            return self._a == other._a
        if isinstance(other, (tuple, list)):
            return len(other) == len(self._a) and self._a.tolist() == list(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(tuple(self._a))  # equal to a tuple of the same ids, so either finds the other in a dict

    def __repr__(self) -> str:
        return f"TokenIds({self._a.tolist()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenIds.from_array, (self._a,))

    @property
    def typecode(self) -> str:
        return self._a.typecode

    def tolist(self) -> list[int]:
        return self._a.tolist()

    def tobytes(self) -> bytes:
        return self._a.tobytes()

    def view(self) -> memoryview:
        """The ids' buffer, read-only, without a copy (for hashing, writing or numpy)."""
        return memoryview(self._a).toreadonly()

    def to_array(self, typecode: str) -> array[int]:
        """A new array of ``typecode`` holding these ids (a byte copy when the typecode matches)."""
        if typecode == self._a.typecode:
            return array(typecode, self._a)
        return array(typecode, self._a.tolist())


_ARRAY: Any = TokenIds.__dict__["_a"]  # the slot itself, under SplicedIds' property


class SplicedIds(TokenIds):
    """Ids cut from other arrays, copied into one only when something needs them whole.

    An agent trace's later turn re-sends most of the one before (workloads/trace_reuse.py). Holding each turn as a
    copy of its own cost the seglen preset's first read 178 MB of fresh pages, a sixth of its CPU in page faults on
    this kind of machine; the replay only packs each input once (``tobytes``), which joins the pieces and keeps
    nothing. Anything else (an index, a slice, ``==``, ``view``) joins them once and keeps the array, as
    ``TokenIds`` holds it. Pieces are byte views of plain arrays: a piece of another ``SplicedIds`` is mapped onto
    its pieces (a bisection of their ends), so no chain of turns is walked."""

    __slots__ = ("_code", "_ends", "_n", "_views")
    _views: list[memoryview] | None  # None once joined

    def __init__(self, code: str, views: list[memoryview]) -> None:
        self._code, self._views = code, views
        self._ends = list(accumulate(map(len, views)))  # each piece's end, in bytes
        self._n = (self._ends[-1] if self._ends else 0) // array(code).itemsize

    @property
    def _a(self) -> array[int]:
        if self._views is not None:
            out = array(self._code)
            out.frombytes(b"".join(self._views))
            _ARRAY.__set__(self, out)
            self._views = None
        value: array[int] = _ARRAY.__get__(self)
        return value

    @_a.setter
    def _a(self, values: array[int]) -> None:
        _ARRAY.__set__(self, values)
        self._views = None

    def __len__(self) -> int:
        return self._n

    @property
    def typecode(self) -> str:
        return self._code

    def tobytes(self) -> bytes:
        return self._a.tobytes() if self._views is None else b"".join(self._views)

    def _pieces(self, start: int, stop: int) -> list[memoryview]:
        """Byte views of ids ``start:stop`` (0 <= start <= stop <= len), not joined."""
        if self._views is None:
            return _bytes_of(self._a, start, stop)
        width = array(self._code).itemsize
        b0, b1, ends = start * width, stop * width, self._ends
        if b0 >= b1:
            return []
        i, j = bisect_right(ends, b0), bisect_left(ends, b1)  # the pieces holding the first and the last byte
        s_i, s_j = ends[i - 1] if i else 0, ends[j - 1] if j else 0
        if i == j:
            return [self._views[i][b0 - s_i : b1 - s_i]]
        return [self._views[i][b0 - s_i :], *self._views[i + 1 : j], self._views[j][: b1 - s_j]]


def _bytes_of(values: array[int], start: int, stop: int) -> list[memoryview]:
    width = values.itemsize
    return [memoryview(values).cast("B")[start * width : stop * width]] if stop > start else []


def _parts_of(ids: TokenIds, start: int, stop: int) -> list[memoryview]:
    """``ids[start:stop]`` as byte views of plain arrays."""
    return ids._pieces(start, stop) if isinstance(ids, SplicedIds) else _bytes_of(ids._a, start, stop)


def as_token_ids(ids: Sequence[int]) -> TokenIds:
    return ids if isinstance(ids, TokenIds) else TokenIds(ids)


_WIDTHS = {"i": 4, "q": 8}


def largest_id(ids: Sequence[int]) -> int:
    """The largest of ``ids`` (not empty), read from a ``TokenIds`` buffer without a Python int per id (-1 for an
    empty ``TokenIds``)."""
    if isinstance(ids, TokenIds) and ids.typecode in _WIDTHS:
        return largest_in(ids.view(), ids.typecode)
    return max(ids)


def largest_in(buffer: Any, typecode: str) -> int:
    """The largest of a buffer of native ``typecode`` ("i": int32, "q": int64) values, or -1 when it holds none."""
    if compiled_scans.scan is not None:
        return int(compiled_scans.scan.largest(buffer, _WIDTHS[typecode]))
    import numpy as np  # noqa: PLC0415 - see from_uint32

    values = np.frombuffer(buffer, np.int32 if typecode == "i" else np.int64)
    return int(values.max()) if len(values) else -1
