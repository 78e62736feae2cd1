"""Cache on vs cache off, question by question: exact agreement and McNemar's exact test on the flips.

Each question is answered twice, once by the cache-off arm and once by a cache-on arm, so the two
accuracies are paired: only the questions whose correctness differs (the flips) carry information.
GPU kernels are not bitwise deterministic, so a few flips happen either way; a cache that restores the
wrong state makes answers wrong, so its flips are lopsided. McNemar's exact test (a binomial test of the
lost flips against the gained ones) asks whether they are lopsided; the tolerance says how large a drop
is worth failing a run for. On an engine that decodes greedily and deterministically no flip is noise:
there every answer text must be equal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Answer", "FlipTest", "first_difference", "flip_test", "one_sided_binomial_p"]


@dataclass(frozen=True, slots=True)
class Answer:
    """One question's outcome in one arm (from the accuracy probe's samples)."""

    question: str  # "<dataset>/<index>"
    prediction: str  # the model's whole answer text
    extracted: str  # the answer evalscope extracted from it
    correct: bool


@dataclass(frozen=True, slots=True)
class FlipTest:
    questions: int  # asked in both arms
    base_correct: int
    cand_correct: int
    lost: tuple[str, ...]  # right with the cache off, wrong with it on
    gained: tuple[str, ...]  # wrong with the cache off, right with it on
    p_value: float  # one-sided: P(at least this many lost flips | flips are a fair coin)

    @property
    def drop(self) -> float:
        """Accuracy lost with the cache on, as a fraction of the questions (negative: gained)."""
        return (len(self.lost) - len(self.gained)) / self.questions if self.questions else 0.0

    def regressed(self, *, alpha: float, tolerance: float) -> bool:
        """Lopsided flips (p < alpha) *and* a drop beyond the tolerance."""
        return self.p_value < alpha and self.drop > tolerance

    def drop_interval(self, *, confidence: float) -> tuple[float, float, float]:
        """(low, high, se) of the accuracy drop: Agresti and Min's (2005) interval for a paired difference of
        proportions, a Wald interval after adding 1/2 to each cell, so no flips in 20 questions is not a zero-width
        interval that "proves" no drop."""
        n = self.questions + 2
        lost, gained = len(self.lost) + 0.5, len(self.gained) + 0.5
        d = (lost - gained) / n
        se = math.sqrt(max(0.0, (lost + gained) - (lost - gained) ** 2 / n)) / n
        z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)
        return d - z * se, d + z * se, se


def one_sided_binomial_p(successes: int, trials: int) -> float:
    """P(X >= successes) for X ~ Binomial(trials, 1/2), exactly (integers: no rounding at the tails)."""
    if trials == 0:
        return 1.0
    tail = sum(math.comb(trials, k) for k in range(successes, trials + 1))
    return float(tail / 2**trials)


def flip_test(base: Mapping[str, Answer], cand: Mapping[str, Answer]) -> FlipTest:
    """Pairs the answers by question; questions only one arm answered are not counted."""
    shared = sorted(base.keys() & cand.keys())
    lost = tuple(q for q in shared if base[q].correct and not cand[q].correct)
    gained = tuple(q for q in shared if cand[q].correct and not base[q].correct)
    return FlipTest(
        questions=len(shared),
        base_correct=sum(base[q].correct for q in shared),
        cand_correct=sum(cand[q].correct for q in shared),
        lost=lost,
        gained=gained,
        p_value=one_sided_binomial_p(len(lost), len(lost) + len(gained)),
    )


def first_difference(base: Mapping[str, Answer], cand: Mapping[str, Answer]) -> str | None:
    """The first question (in question order) whose answer text differs, or that only one arm answered."""
    for q in sorted(base.keys() | cand.keys(), key=_question_order):
        b, c = base.get(q), cand.get(q)
        if b is None or c is None or b.prediction != c.prediction:
            return q
    return None


def _question_order(question: str) -> tuple[str, int]:
    dataset, _, index = question.rpartition("/")
    return (dataset, int(index)) if index.isdigit() else (question, -1)
