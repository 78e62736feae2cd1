"""Whether a trial ran, and whether its records hold every planned request exactly once.

A run cut short must never read as a pass: an arm whose server never started once showed "survival pass: all
requests completed" beside "completed 0", and a candidate that recorded 12 of 60 requests of a trial passed
comparison. Survival (within a run and across runs) counts planned requests against recorded ones here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from hybridbench.records.schema import Record

__all__ = ["TRIAL_STATES", "Coverage", "TrialOutcome", "TrialState", "coverage"]

# ran: the load finished; not run: never started (an earlier trial ended the run); interrupted: a signal
# stopped it; engine died: the server died or hung during it.
TrialState = Literal["ran", "not run", "interrupted", "engine died"]
TRIAL_STATES: tuple[str, ...] = get_args(TrialState)


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    trial_id: str
    workload: str
    arm: str
    repeat: int
    state: TrialState
    planned_requests: int | None  # None: nothing recorded how many (an old bundle without its trace)
    detail: str = ""  # why it did not run to the end (the engine's error, the signal)


@dataclass(frozen=True, slots=True)
class Coverage:
    planned: int
    recorded: int  # distinct planned requests with a record
    duplicated: int  # records beyond the first of a request, or of a request the trial never planned

    @property
    def missing(self) -> int:
        return self.planned - self.recorded

    @property
    def complete(self) -> bool:
        return self.missing == 0 and self.duplicated == 0

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"{self.recorded} of {self.planned} planned requests recorded")
        if self.duplicated:
            parts.append(f"{self.duplicated} duplicated or unplanned record(s)")
        return "; ".join(parts)


def coverage(planned: int, records: Sequence[Record]) -> Coverage:
    """``records`` of one trial against the ``planned`` requests it was to send (indices 0..planned-1)."""
    seen = Counter(r.request_index for r in records)
    recorded = sum(1 for i in seen if isinstance(i, int) and 0 <= i < planned)
    return Coverage(planned, recorded, len(records) - recorded)
