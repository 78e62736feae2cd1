"""What the forecast simulates of a workload too large to simulate whole, and how a sample's wall time stands for
the whole load's.

A sample is every k-th *prefix group*: sessions whose first turns open with the same
:data:`PREFIX_KEY_TOKENS` tokens, kept or dropped together. Sampling single sessions instead would leave each shared
prefix fewer requests to amortise its first miss over (radix's 50 x 10 at every 2nd session: a hit rate of 59% for
the whole load's 72%, and a wall time 10% too long).

A sample is a lighter load all the same (fewer groups in the cache, fewer sessions live at once), so its hit rate and
TTFT are its own, never the GPU run's. Its wall time scales only where the load's pace does not depend on how loaded
the server is:

* a closed loop keeps the same requests in flight whenever the sample has sessions enough to fill it: requests
  finish at the whole load's pace while the loop is full, and only the final drain is not repeated;
* Poisson arrivals of single requests keep their rate (one gap per request), so the whole load arrives over its own
  schedule's span (exact, drawn from the whole trace) and the sample's drain follows; when the server falls behind
  in the sample its backlog grows with time, and so does the whole load's drain;
* a trace replay, or any open loop of multi-turn sessions, is simulated whole: a later turn waits for the earlier
  ones, so a session lasts as long as the server is slow, which depends on how many sessions are live at once. No
  scaling of a sample finds that (l2 at every 5th session: 2m19s unscaled, 7m56s with its timestamps compressed 5x
  and the wall time scaled back; whole: 5m29s per trial).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hybridbench.records.schema import Record
from workloads.arrival import LoadSpec
from workloads.trace import TraceRow

__all__ = ["PREFIX_KEY_TOKENS", "Sample", "SendPhase", "sample_load", "whole_wall_s"]

# Longer than a chat template's opening, shorter than the system prompts of the shipped prefix loads (>= 256).
PREFIX_KEY_TOKENS = 256
# A closed loop's sample keeps at least this many sessions per slot, so the loop is full for most of the sample.
SESSIONS_PER_SLOT = 2


@dataclass(frozen=True, slots=True)
class Sample:
    """The rows to simulate and what they stand for."""

    rows: tuple[TraceRow, ...]
    whole_requests: int
    stride: int  # every stride-th group kept; 1: the whole load
    groups: int  # in the whole load
    unit: str  # "prefix group", or "session" where no stride of whole groups fits the budget
    why_whole: str = ""  # why a load over the budget was simulated whole anyway

    @property
    def sampled(self) -> bool:
        return self.stride > 1

    def describe(self, name: str) -> str:
        if self.why_whole:
            return f"{name}: all {self.whole_requests} requests, more than a sample holds: {self.why_whole}"
        kept = -(-self.groups // self.stride)
        return (f"{name}: 1 {self.unit} in {self.stride} simulated ({kept} of {self.groups} {self.unit}s, "
                f"{len(self.rows)} of {self.whole_requests} requests); wall time scaled to the whole load")


def _groups(rows: Sequence[TraceRow], by_prefix: bool) -> list[list[TraceRow]]:
    first: dict[int | str, object] = {}
    for r in rows:
        if r.session_id not in first:
            first[r.session_id] = r.input_tokens[:PREFIX_KEY_TOKENS] if by_prefix else r.session_id
    order = {key: i for i, key in enumerate(dict.fromkeys(first.values()))}
    out: list[list[TraceRow]] = [[] for _ in order]
    for r in rows:
        out[order[first[r.session_id]]].append(r)
    return out


def _sessions(group: Sequence[TraceRow]) -> int:
    return len({r.session_id for r in group})


def _unscalable(rows: Sequence[TraceRow], load: LoadSpec) -> str:
    if load.kind == "trace":
        return "a trace replay's sessions last as long as the server is slow, which a lighter sample is not"
    multi_turn = len({r.session_id for r in rows}) < len(rows)
    if load.kind == "poisson" and multi_turn:
        return "an open loop's later turns wait for the earlier ones, as long as the server is slow"
    if load.kind == "poisson" and not math.isfinite(load.request_rate or math.inf) and not load.max_concurrency:
        return "every request is sent at once: a sample is a smaller burst"
    return ""


def _slots(load: LoadSpec) -> int:
    """In-flight cap; 0: none. A capped open loop behaves as a closed loop while the cap binds."""
    return load.max_concurrency or 0


def sample_load(rows: Sequence[TraceRow], load: LoadSpec, max_requests: int) -> Sample:
    """The whole load when it has at most ``max_requests`` requests or cannot be scaled from a sample; else every
    k-th prefix group, the smallest k that fits (sessions when no whole groups fit). A loop's sample keeps
    :data:`SESSIONS_PER_SLOT` sessions per slot even past ``max_requests``."""
    whole = Sample(tuple(rows), len(rows), 1, len({r.session_id for r in rows}), "session")
    if len(rows) <= max_requests:
        return whole
    if why := _unscalable(rows, load):
        return Sample(whole.rows, whole.whole_requests, 1, whole.groups, "session", why)
    need = SESSIONS_PER_SLOT * _slots(load)
    for unit, groups in (("prefix group", _groups(rows, by_prefix=True)), ("session", _groups(rows, by_prefix=False))):
        sizes = [len(g) for g in groups]
        sessions = [_sessions(g) for g in groups]
        fits = [k for k in range(2, len(groups) + 1) if sum(sizes[::k]) <= max_requests]
        if not fits:
            continue
        # The smallest stride that fits, or a smaller one where the loop needs more sessions than that keeps.
        k = next((s for s in range(fits[0], 1, -1) if sum(sessions[::s]) >= need), 1)
        if k == 1:
            why = f"a sample would hold fewer than {SESSIONS_PER_SLOT} sessions per slot of its loop of {_slots(load)}"
            return Sample(whole.rows, whole.whole_requests, 1, len(groups), unit, why)
        keep = {r.session_id for g in groups[::k] for r in g}
        kept = tuple(r for r in rows if r.session_id in keep)  # in the trace's order: a loop sends in it
        return Sample(kept, len(rows), k, len(groups), unit)
    return Sample(whole.rows, whole.whole_requests, 1, whole.groups, "session",
                  "no sample of whole sessions is that small")


@dataclass(frozen=True, slots=True)
class SendPhase:
    """When a simulated trial sent its requests and when it finished, from its records."""

    first_send_s: float
    last_send_s: float
    last_end_s: float
    in_flight_early: float  # mean requests in flight over the first half of the sending
    in_flight_late: float  # ... over the second half
    waited: bool  # a request was sent after it was due: the in-flight cap bound

    @classmethod
    def of(cls, records: Sequence[Record]) -> SendPhase:
        spans = [(r.sent_s, r.end_s if r.end_s is not None else r.sent_s) for r in records if r.sent_s is not None]
        if not spans:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0, waited=False)
        first, last = min(a for a, _ in spans), max(a for a, _ in spans)
        mid = (first + last) / 2

        def mean_in_flight(lo: float, hi: float) -> float:
            return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans) / (hi - lo) if hi > lo else 0.0

        waited = any(r.sent_s is not None and r.sent_s > r.scheduled_s + 1e-6 for r in records)
        return cls(first, last, max(b for _, b in spans), mean_in_flight(first, mid), mean_in_flight(mid, last),
                   waited)

    @property
    def wall_s(self) -> float:
        return self.last_end_s - self.first_send_s

    @property
    def drain_s(self) -> float:
        return self.last_end_s - self.last_send_s

    def drain_after(self, arrivals_s: float) -> float:
        """The drain after the last of arrivals spanning ``arrivals_s`` at this phase's rate: the backlog, and so the
        drain, grows with time at the rate it grew in this phase (a server falling behind), else stays as it is."""
        half = (self.last_send_s - self.first_send_s) / 2
        growth = (self.in_flight_late - self.in_flight_early) / half if half > 0 else 0.0
        # Extrapolated from the middle of the late half (3/4 of the sending) to its end, and to the longer span's.
        now = self.in_flight_late + growth * half / 2
        then = self.in_flight_late + growth * (arrivals_s - 1.5 * half)
        return self.drain_s * (then / now) if growth > 0 and now > 0 and then > now else self.drain_s


def whole_wall_s(sample: Sample, load: LoadSpec, phase: SendPhase, whole_arrivals_s: float) -> float:
    """The whole load's wall time from its sample's; ``whole_arrivals_s``: the last arrival of the whole load's own
    schedule (Poisson)."""
    if not sample.sampled:
        return phase.wall_s
    n, whole = len(sample.rows), sample.whole_requests
    slots = _slots(load)
    if load.kind == "closed" or (slots and phase.waited) or not math.isfinite(load.request_rate or math.inf):
        # While the loop is full, each send follows a finish: the whole load sends its last request once all but a
        # loop's worth have finished, at the pace the sample finished its own.
        c = min(slots or n, n - 1)
        return (phase.last_send_s - phase.first_send_s) * (whole - c) / (n - c) + phase.drain_s
    return whole_arrivals_s + phase.drain_after(whole_arrivals_s)
