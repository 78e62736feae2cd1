"""The one record constructor: a request's outcome plus its trial's identity becomes a :class:`Record`.

Every engine's records come through :func:`trial_record` — the server trial runner's (measured over
HTTP) and the simulator's (modelled) alike — so a field is named and filled in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hybridbench.plan.types import Trial
from hybridbench.records.schema import CacheState, Record, Status

__all__ = ["RequestOutcome", "trial_record"]


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """What happened to one request; times in seconds after the trial start."""

    index: int  # the row's index in the trace
    session_id: int | str
    turn_id: int
    scheduled_s: float
    sent_s: float | None
    first_token_s: float | None
    end_s: float | None
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None
    status: Status
    error: str = ""
    itl_ms: Sequence[float] = field(default_factory=tuple)
    modelled_times: tuple[float, float, float] | None = None  # the reference server's modelled clock


def trial_record(run_id: str, trial: Trial, outcome: RequestOutcome, cache_state: CacheState, *,
                 modelled: bool = False) -> Record:
    o = outcome
    return Record(
        run_id=run_id, trial_id=trial.trial_id, arm=trial.arm, workload=trial.workload, repeat=trial.repeat,
        request_index=o.index, session_id=o.session_id, turn_id=o.turn_id, scheduled_s=o.scheduled_s,
        sent_s=o.sent_s, first_token_s=o.first_token_s, end_s=o.end_s, prompt_tokens=o.prompt_tokens,
        output_tokens=o.output_tokens, cached_tokens=o.cached_tokens, status=o.status, error=o.error,
        itl_ms=list(o.itl_ms), cache_state=cache_state, modelled=modelled,
        modelled_received_s=None if o.modelled_times is None else o.modelled_times[0],
        modelled_first_token_s=None if o.modelled_times is None else o.modelled_times[1],
        modelled_end_s=None if o.modelled_times is None else o.modelled_times[2],
    )
