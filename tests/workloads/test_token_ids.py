"""TokenIds keeps every id it is given, whatever iterable they come in."""

from __future__ import annotations

import pickle
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.token_ids import SplicedIds, TokenIds


def test_token_ids_from_an_iterator_keeps_every_id_past_int32() -> None:
    # An id past int32 makes the int32 array give up half way through a one-shot iterator: the ids it had
    # already consumed must not be lost when the wider array is built.
    ids = [5, 6, 2**40, 7]
    assert TokenIds(iter(ids)) == tuple(ids)
    assert TokenIds(x for x in ids).tolist() == ids



_IDS = st.lists(st.integers(0, 2**31 - 1), max_size=12)


@st.composite
def _pieces(draw: st.DrawFn, sources: list[TokenIds]) -> list[tuple[TokenIds, int, int]]:
    pieces = []
    for _ in range(draw(st.integers(0, 4))):
        ids = draw(st.sampled_from(sources))
        start = draw(st.integers(0, len(ids)))
        pieces.append((ids, start, draw(st.integers(start, len(ids)))))
    return pieces


@settings(max_examples=300, deadline=None)
@given(data=st.data(), plain=st.lists(_IDS, min_size=1, max_size=4))
def test_spliced_ids_are_the_ids_they_were_cut_from(data: st.DataObject, plain: list[list[int]]) -> None:
    """Spliced from plain arrays and from other spliced ids (a turn cut from the turn before, itself cut), they hold
    exactly the ids a copy would, behave as TokenIds in every way, and pack (tobytes) without being joined."""
    sources = [TokenIds(ids) for ids in plain]
    for _ in range(3):  # each round may cut from the spliced ids of the rounds before
        pieces = data.draw(_pieces(sources))
        want = [i for ids, start, stop in pieces for i in list(ids)[start:stop]]
        lazy = TokenIds.splice(pieces, lazy=True)
        copied = TokenIds.splice(pieces)
        if pieces:
            assert isinstance(lazy, SplicedIds) and lazy._views is not None
            assert all(type(view.obj) is array for view in lazy._views)  # never a chain of spliced ids
            assert lazy.tobytes() == copied.tobytes() == array("i", want).tobytes() and lazy._views is not None
        assert len(lazy) == len(want) and lazy.typecode == copied.typecode == "i"
        sources.append(lazy)
    kept = sources[-1]
    want = list(kept)  # joined here
    assert kept == TokenIds(want) == tuple(want) and hash(kept) == hash(tuple(want)) and kept[1:] == tuple(want[1:])
    assert pickle.loads(pickle.dumps(kept)) == kept and kept.tobytes() == array("i", want).tobytes()


def test_a_spliced_piece_of_a_spliced_turn_lands_on_the_right_ids() -> None:
    a, b, c = TokenIds([1, 2, 3]), TokenIds([4, 5]), TokenIds([6, 7, 8, 9])
    turn = TokenIds.splice([(a, 0, 3), (b, 0, 2), (c, 1, 4)], lazy=True)  # 1 2 3 4 5 7 8 9
    assert list(TokenIds.splice([(turn, 2, 6)], lazy=True)) == [3, 4, 5, 7]  # across three pieces
    assert list(TokenIds.splice([(turn, 3, 5)], lazy=True)) == [4, 5]  # one whole piece
    assert list(TokenIds.splice([(turn, 5, 6), (turn, 0, 1)], lazy=True)) == [7, 1]
    assert len(TokenIds.splice([(turn, 4, 4)], lazy=True)) == 0
