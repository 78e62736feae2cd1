"""The accuracy verdict's statistics: exact binomial tails, flip pairing, first differing answer."""

from __future__ import annotations

import math

from hybridbench.metrics.paired_accuracy import Answer, first_difference, flip_test, one_sided_binomial_p


def _arm(correct: dict[str, bool], text: dict[str, str] | None = None) -> dict[str, Answer]:
    return {q: Answer(q, (text or {}).get(q, "x"), "1", ok) for q, ok in correct.items()}


def test_binomial_tail_is_exact():
    assert one_sided_binomial_p(0, 0) == 1.0
    assert one_sided_binomial_p(0, 5) == 1.0
    assert one_sided_binomial_p(5, 5) == 1 / 32
    assert one_sided_binomial_p(3, 4) == 5 / 16  # C(4,3) + C(4,4) over 16
    # symmetric: P(X >= k) + P(X <= k-1) = 1
    n = 40
    lower = sum(math.comb(n, j) for j in range(17)) / 2**n
    assert math.isclose(one_sided_binomial_p(17, n) + lower, 1.0)


def test_flips_pair_by_question_and_ignore_unshared():
    base = _arm({"g/0": True, "g/1": True, "g/2": False, "g/3": True, "g/9": True})
    cand = _arm({"g/0": False, "g/1": True, "g/2": True, "g/3": False})
    t = flip_test(base, cand)
    assert t.questions == 4
    assert t.lost == ("g/0", "g/3")
    assert t.gained == ("g/2",)
    assert (t.base_correct, t.cand_correct) == (3, 2)
    assert math.isclose(t.drop, 0.25)
    assert math.isclose(t.p_value, 0.5)  # 2 of 3 flips lost: P(X >= 2 | n=3) = 4/8


def test_lopsided_flips_beyond_tolerance_regress():
    n = 100
    base = _arm({f"g/{i}": True for i in range(n)})
    cand = _arm({f"g/{i}": i >= 8 for i in range(n)})  # 8 lost, none gained
    t = flip_test(base, cand)
    assert t.p_value == 1 / 2**8
    assert t.regressed(alpha=0.05, tolerance=0.01)
    assert not t.regressed(alpha=0.05, tolerance=0.10)  # an 8-point drop is inside a 10-point tolerance
    assert not t.regressed(alpha=0.001, tolerance=0.01)  # p = 0.0039 is not below 0.001


def test_balanced_flips_do_not_regress():
    base = _arm({f"g/{i}": i % 2 == 0 for i in range(20)})
    cand = _arm({f"g/{i}": i % 2 == 1 for i in range(20)})  # 10 lost, 10 gained: noise, not a drop
    t = flip_test(base, cand)
    assert t.drop == 0.0
    assert not t.regressed(alpha=0.05, tolerance=0.0)


def test_first_difference_is_in_question_order_and_sees_missing_answers():
    base = _arm({"g/2": True, "g/10": True, "g/3": True}, {"g/2": "a", "g/10": "b", "g/3": "c"})
    same = _arm({"g/2": True, "g/10": True, "g/3": True}, {"g/2": "a", "g/10": "b", "g/3": "c"})
    assert first_difference(base, same) is None
    # text differs at 10 and at 3: 3 comes first numerically (not as a string)
    diff = _arm({"g/2": True, "g/10": True, "g/3": True}, {"g/2": "a", "g/10": "B", "g/3": "C"})
    assert first_difference(base, diff) == "g/3"
    missing = _arm({"g/2": True, "g/10": True}, {"g/2": "a", "g/10": "b"})
    assert first_difference(base, missing) == "g/3"
