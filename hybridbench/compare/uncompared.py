"""A (workload, arm) pair that only survival compared: the baseline completed none of its requests.

Its TTFT, throughput and hit-rate rows skip (nothing to pair, a side with no throughput), and skips never block a
pass: beside other pairs that passed, the comparison passed with this pair's timing and hits compared with nothing,
whether the candidate completed them all (survival passed) or lost some the baseline lost too (survival skipped).
The whole comparison's rule (``Comparison.verdict``: survival alone passes nothing) holds for each pair: its rows say
so, inconclusive (exit 1), never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybridbench.compare.deltas import Delta

__all__ = ["UNCOMPARED", "survival_alone"]

UNCOMPARED = "compared nothing but survival (the baseline completed none of this pair's requests)"


def survival_alone(deltas: Sequence[Delta]) -> list[Delta]:
    """``deltas`` of one pair, its skipped rows inconclusive where every row but survival skipped and survival did not
    already keep the comparison from passing (failed or inconclusive)."""
    rest = [d for d in deltas if d.metric != "survival"]
    decided = any(d.metric == "survival" and d.status in ("fail", "inconclusive") for d in deltas)
    if decided or not rest or any(d.status != "skip" for d in rest):
        return list(deltas)
    return [replace(d, status="inconclusive", detail=f"{UNCOMPARED}; {d.detail}") if d.metric != "survival" else d
            for d in deltas]
