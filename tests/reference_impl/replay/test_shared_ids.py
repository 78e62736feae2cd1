"""The replay's token tuples share one int object per id value, and hold the same values as plain tuples."""

from __future__ import annotations

from reference_impl.replay.shared_ids import SharedIds
from workloads.token_ids import TokenIds


def test_equal_ids_are_one_object_across_requests_and_table_growth() -> None:
    ids = SharedIds()
    first = ids.tuple_of(TokenIds([300, 5000, 70_000, 300]))
    assert first == (300, 5000, 70_000, 300)
    assert first[0] is first[3]  # 300 is past CPython's small-int cache: sharing is the table's doing
    grown = ids.tuple_of(TokenIds([1_500_000, 5000]))  # past the table: it grows
    assert grown == (1_500_000, 5000)
    again = ids.tuple_of(TokenIds([70_000, 5000, 300]))
    assert (again[0], again[1], again[2]) == (70_000, 5000, 300)
    assert again[0] is first[2] and again[1] is first[1] is grown[1] and again[2] is first[0]


def test_what_the_table_cannot_hold_is_converted_as_before() -> None:
    ids = SharedIds()
    assert ids.tuple_of(TokenIds([])) == ()
    assert ids.tuple_of(TokenIds([2**40, 7])) == (2**40, 7)  # int64 ids
    assert ids.tuple_of(TokenIds([(1 << 21) + 3])) == ((1 << 21) + 3,)  # past the table's limit
    assert ids.tuple_of([4, 5]) == (4, 5) and ids.tuple_of((6,)) == (6,)
