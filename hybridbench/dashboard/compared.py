"""A comparison's two runs as they are now, beside what compare.json recorded of them: whether each directory
still holds the run compare read (compare.json records both bundles' run ids), each run's own verdict and marks,
and the verdict the dashboard shows for the comparison.

A directory overwritten since (a newer nightly into ``runs/main``, the pull request re-run into ``runs/pr``)
holds runs compare never read: a ``pass`` over them is shown ``inconclusive``, on the index as on the page and
its PNG, with the reason; a ``fail`` stands. So is a ``pass`` over a candidate whose own run failed (``fail``) or
decided nothing (``inconclusive``): the pull request's job fails on it, as its PR summary says. A directory
outside the results root (compare.json is data too: it must not point the dashboard at any other directory) or
gone is not read, and contradicts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError
from hybridbench.report.compare_schema import VERDICT_RANK, current_verdict, unbacked_pass, worst_verdict
from hybridbench.results import Run, read_run
from hybridbench.results.marks import verdict_marks

__all__ = ["Compared", "Side", "compared"]

ROLES = {"base": "baseline", "candidate": "candidate"}


@dataclass(frozen=True, slots=True)
class Side:
    role: str  # baseline | candidate
    label: str  # compare.json's name for the run
    run: Run | None  # the run compared, while its directory inside the root still holds it
    changed: str  # why the directory no longer holds the run compared; "" when it does, or cannot be told
    verdict: str  # the run's own verdict: as it is now when found, else as compare.json recorded it ("" unknown)
    marks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Compared:
    verdict: str  # compare.json's
    shown: str  # the dashboard's: a pass over runs since replaced is inconclusive
    notes: tuple[str, ...]  # why ``shown`` is not ``verdict``
    base: Side
    cand: Side
    not_compared: tuple[str, ...]  # what only one run has (compare lists it, never judges it)

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.base, self.cand


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _side(cmp: Mapping[str, Any], side: str, root: Path) -> Side:
    path, run_id = cmp.get(f"{side}_dir"), cmp.get(f"{side}_run_id")
    recorded = (str(cmp.get(f"{side}_verdict") or ""), _strings(cmp.get(f"{side}_marks")))
    label = str(cmp.get(side, ""))
    if not isinstance(path, str) or not path:
        return Side(ROLES[side], label, None, "", *recorded)
    real, top = Path(path).resolve(), root.resolve()
    if not (real == top or top in real.parents) or not real.is_dir():
        return Side(ROLES[side], label, None, "", *recorded)
    pinned = run_id if isinstance(run_id, str) else ""
    where = str(real.relative_to(top)) if real != top else "."  # the root's own name is on the index already
    try:
        run = read_run(real)
    except ConfigError:
        # Unreadable now (a re-run under way, a damaged file): the run compared, if one was pinned, is not there.
        changed = f"{where} no longer reads as the run compared" if pinned else ""
        return Side(ROLES[side], label, None, changed, *recorded)
    now = run.bundle.run_id if run.bundle is not None else ""
    if pinned and now != pinned:
        changed = f"{where} now holds another run ({now[:12] or 'unfinished'}; compared {pinned[:12]})"
        return Side(ROLES[side], label, None, changed, *recorded)
    if run.bundle is None:
        return Side(ROLES[side], label, run, "", "", verdict_marks(run))
    overrides = (run.bundle.rescored or {}).get("overrides")
    return Side(ROLES[side], label, run, "", current_verdict(run.bundle.verdict, recorded[0],
                                                              _strings(overrides)), verdict_marks(run))


def compared(cmp: Mapping[str, Any], root: Path) -> Compared:
    base, cand = (_side(cmp, side, root) for side in ROLES)
    verdict = str(cmp.get("verdict", ""))
    changed = tuple(f"{s.role} {s.changed}" for s in (base, cand) if s.changed)
    # Compare judged runs that are no longer there: its pass cannot be shown as this store's; a fail stands. A pull
    # request whose own run failed (or decided nothing) is not shown passing for a comparison that passed.
    # A verdict row outranks a verdict beside it that says better (compare never writes that; a hand edit can).
    rows = [str(d.get("status")) for d in cmp.get("deltas", []) if isinstance(d, Mapping)]
    worst_row = worst_verdict("pass", *rows)
    # A pass no row backs (every row skipped, or none): the PR summary refuses that file; shown, it is no pass.
    unbacked = unbacked_pass(verdict, rows)
    shown = worst_verdict(verdict, *(["inconclusive"] if changed or unbacked else []), cand.verdict, worst_row)
    why = []
    if shown != verdict:
        why.append(f"compare said {verdict}" + (" with no passing verdict row" if unbacked else "")
                   + (" of runs since replaced" if changed else ""))
        if VERDICT_RANK.get(cand.verdict, 0) > VERDICT_RANK.get(verdict, 0):
            why.append(f"the candidate's own run: {cand.verdict}")
        if VERDICT_RANK[worst_row] > VERDICT_RANK.get(verdict, 0):
            why.append(f"a verdict row says {worst_row}")
    return Compared(verdict, shown, (*why, *changed), base, cand, _strings(cmp.get("not_compared")))
