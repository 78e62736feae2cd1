"""TokenIds keeps every id it is given, whatever iterable they come in."""

from __future__ import annotations

from workloads.token_ids import TokenIds


def test_token_ids_from_an_iterator_keeps_every_id_past_int32() -> None:
    # An id past int32 makes the int32 array give up half way through a one-shot iterator: the ids it had
    # already consumed must not be lost when the wider array is built.
    ids = [5, 6, 2**40, 7]
    assert TokenIds(iter(ids)) == tuple(ids)
    assert TokenIds(x for x in ids).tolist() == ids

