"""Each run's per-repeat figures for compare's Welch intervals, and the repeats that have none though they ran.

A repeat whose completed requests left its figure unknown (a first token never seen, a modelled stamp missing)
is not one fewer repeat: dropped, a slow repeat whose requests lacked a stamp left the verdict to the others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hybridbench.results import TrialRun

__all__ = ["per_repeat", "unmeasured_repeats"]


def per_repeat(summaries: Sequence[dict[str, Any]], key: str) -> list[float]:
    """The repeats' figures under ``key``, those with one."""
    return [v for s in summaries if not math.isnan(v := float(s[key]))]


def unmeasured_repeats(sides: Sequence[tuple[str, Sequence[TrialRun], Sequence[dict[str, Any]]]], key: str) -> str:
    """Why a row over ``key`` cannot decide ("" when it can): the trials of each (side, trials, their summaries)
    that completed requests but have no figure under ``key``."""
    gaps = [f"{side} {t.trial_id}" for side, trials, sums in sides for t, s in zip(trials, sums, strict=True)
            if any(r.status == "ok" for r in t.records) and math.isnan(float(s[key]))]
    if not gaps:
        return ""
    clock = "a modelled " if key.startswith("modelled_") else "a "
    return (f"{', '.join(gaps)} completed requests but has no {key} ({clock}time missing from a completed request): "
            "the repeat is unmeasured, not absent, so the others do not decide")
