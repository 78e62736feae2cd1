"""The token draws the generators share: numpy computes them, and every id is what the published definition gives
(one getrandbits call, its little-endian 32-bit words modulo the vocabulary), so traces stay byte-identical."""

from __future__ import annotations

import random
import struct
from array import array

import pytest

from workloads.sampling import MAX_SEQUENCE_TOKENS, MAX_VOCAB, random_token_array, random_tokens
from workloads.token_ids import TokenIds


def _spelt_out(rng: random.Random, n: int, vocab: int) -> tuple[int, ...]:
    words = struct.unpack(f"<{n}I", rng.getrandbits(32 * n).to_bytes(4 * n, "little"))
    return tuple(w % vocab for w in words)


@pytest.mark.parametrize("vocab", [1, 2, 7, 151_936, 2**31 - 1, 2**31 + 5, MAX_VOCAB])
@pytest.mark.parametrize("n", [1, 2, 1000])
def test_both_draws_give_the_spelt_out_ids_and_leave_the_rng_alike(vocab: int, n: int) -> None:
    seeds = [random.Random(9) for _ in range(3)]
    expected = _spelt_out(seeds[0], n, vocab)
    assert random_tokens(seeds[1], n, vocab) == expected
    drawn = random_token_array(seeds[2], n, vocab)
    assert drawn.typecode == "I" and tuple(drawn) == expected
    assert seeds[0].random() == seeds[1].random() == seeds[2].random()  # the same state after


def test_nothing_is_drawn_for_no_tokens_and_too_many_are_refused() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    assert random_tokens(rng, 0, 10) == () and len(random_token_array(rng, -3, 10)) == 0
    assert rng.getstate() == state
    with pytest.raises(Exception, match="longer than any model's context"):
        random_token_array(rng, MAX_SEQUENCE_TOKENS + 1, 10)
    for vocab in (0, MAX_VOCAB + 1):  # numpy would give ids of 0 (or wrap) where Python's modulo raised
        with pytest.raises(Exception, match=r"vocab size must be in \[1, 2\*\*32\]"):
            random_token_array(rng, 3, vocab)


def test_uint32_ids_become_int32_unless_one_is_past_it() -> None:
    small = TokenIds.from_uint32(array("I", [0, 5, 2**31 - 1]))
    assert small.typecode == "i" and small == (0, 5, 2**31 - 1) and small == TokenIds([0, 5, 2**31 - 1])
    wide = TokenIds.from_uint32(array("I", [1, 2**31, 2**32 - 1]))
    assert wide.typecode == "q" and wide == (1, 2**31, 2**32 - 1) and wide == TokenIds([1, 2**31, 2**32 - 1])
    assert TokenIds.from_uint32(array("I")) == ()
