"""Where a run's verdict comes from, and whether it can stand as a baseline.

A verdict is the run's own only when nothing changed it after the run: a re-scoring (``python -m
hybridbench.rescore``) with other checks or looser limits, a run whose engine died or that was interrupted,
one with trials missing, one whose own command line set how it is scored (``checks.enabled=[survival]``,
``checks.ttft_regression=1e308``: the experiment's verdict as written was not asked; a ``checks=strict`` group is
not such a change), one where no check decided anything (every check skipped, or none enabled): each is
named by a mark, shown beside the verdict in ``results ls``, the dashboard and compare, and such a run is never
picked by ``compare latest:``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from hybridbench.config.scoring_keys import marks_verdict
from hybridbench.errors import ConfigError
from hybridbench.results.served_block import block_mark, block_mismatches
from hybridbench.results.types import Run

__all__ = ["INCOMPLETE_VERDICTS", "complete", "refuse_incomplete", "scoring_overrides", "verdict_marks"]

INCOMPLETE_VERDICTS = ("error", "interrupted")
# Re-scoring keys that loosen or narrow what a verdict asks (a threshold, the set of checks, the baseline).
_NARROWING = ("checks.enabled", "checks.baseline_arm")


def complete(run: Run) -> bool:
    """Every planned trial ran to its end and the run's own verdict is not error/interrupted."""
    b = run.bundle
    if b is None or b.verdict in INCOMPLETE_VERDICTS:
        return False
    if any(t.state != "ran" for t in b.trials):
        return False
    return all(run.missing_trials(t.workload, t.arm) == 0 for t in run.plan.trials)


def _rescore_mark(overrides: Sequence[object]) -> str:
    keys = [str(o).split("=", 1)[0].lstrip("+~") for o in overrides]
    if not keys:
        return "re-scored"
    kind = "checks changed" if any(k in _NARROWING for k in keys) else "limits changed"
    return f"re-scored, {kind}: {' '.join(str(o) for o in overrides)}"


def scoring_overrides(command: str) -> list[str]:
    """The overrides in a run's own command line (``python -m hybridbench ...``) that set how it is scored."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote in a hand-edited bundle: nothing to read as overrides
        return []
    return [w for w in words if "=" in w and _sets_scoring(*w.split("=", 1))]


def _sets_scoring(key: str, value: str) -> bool:
    # The whole block replaced (checks={enabled:[survival]}) narrows scoring as checks.enabled=... does; a checks
    # group (checks=strict) is a reviewed file, not an override.
    key = key.lstrip("+~")
    return marks_verdict(key) or (key == "checks" and value.lstrip().startswith("{"))


def verdict_marks(run: Run) -> tuple[str, ...]:
    """Short notes on the verdict's provenance, empty for a complete run's own verdict."""
    b = run.bundle
    if b is None:
        return ("unfinished",)
    marks = []
    if b.rescored is not None:
        overrides = b.rescored.get("overrides")
        marks.append(_rescore_mark(overrides if isinstance(overrides, list) else []))
    own = scoring_overrides(b.provenance.command)
    if own:
        marks.append(f"scoring set on its command line: {' '.join(own)}")
    if b.verdict in INCOMPLETE_VERDICTS:
        marks.append(f"run {b.verdict}")
    elif not complete(run):
        marks.append("trials missing")
    if b.verdict == "pass" and not any(c.status in ("pass", "fail") for c in b.checks):
        marks.append("no check decided")
    if served := block_mark(block_mismatches(b.provenance.engine.extra)):
        marks.append(served)
    return tuple(marks)


def refuse_incomplete(run: Run, role: str) -> None:
    """A ConfigError (exit 2) when ``run``'s own verdict says it did not complete (its engine died, or it was
    interrupted): complete records beside such a verdict do not make it a measurement to compare."""
    b = run.bundle
    if b is not None and b.verdict in INCOMPLETE_VERDICTS:
        why = f" ({b.infrastructure_error[:120]})" if b.infrastructure_error else ""
        raise ConfigError(f"{role} {run.path}: its own run ended {b.verdict}{why}; compare needs a run that "
                          "completed (re-run it)")
