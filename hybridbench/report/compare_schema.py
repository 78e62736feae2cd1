"""compare.json's schema version and how its verdicts rank, in a module of its own: the PR summary reads
compare.json on a runner with nothing installed (ci/pr.yml's publish job runs ``python3 -m
hybridbench.dashboard.pr_summary`` from the checkout), so it must not import compare itself (numpy, through its
statistics); the dashboard's comparison pages show the same worst-of verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["COMPARE_SCHEMA_VERSION", "VERDICT_RANK", "current_verdict", "unbacked_pass", "worst_verdict"]

COMPARE_SCHEMA_VERSION = 1

VERDICT_RANK = {"fail": 3, "inconclusive": 2, "pass": 1}


def worst_verdict(verdict: str, *others: str) -> str:
    """``verdict``, or the worst of ``others`` that is worse (``fail`` > ``inconclusive``): another's pass never
    stands in for a verdict that is not one."""
    return max((verdict, *(o for o in others if o in ("fail", "inconclusive"))), key=lambda v: VERDICT_RANK.get(v, 0))


def unbacked_pass(verdict: str, row_statuses: Iterable[str]) -> bool:
    """A ``pass`` that no passing verdict row backs (none, or every row skipped): compare never writes it (such a
    comparison is inconclusive); a hand-edited or damaged compare.json can, and no view may show it as a pass."""
    return verdict == "pass" and "pass" not in set(row_statuses)


def current_verdict(now: str, recorded: str, overrides: Sequence[str]) -> str:
    """A compared run's verdict as the views show it: ``now`` (its bundle's, re-scored since the comparison or not)
    unless that cannot stand for it. A verdict that is none of pass/fail/inconclusive is inconclusive; a re-scoring
    with overrides (checks dropped, limits widened) cannot lift the ``recorded`` verdict the comparison saw, only
    lower it: a narrowed re-score turning a failing pull request green is exactly a wrong pass."""
    if now not in VERDICT_RANK:
        return "inconclusive"
    return worst_verdict(now, recorded) if overrides else now
