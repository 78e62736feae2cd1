"""The load: when each request of a trace is meant to be sent. The one definition, shared by hybridbench's
client driver and reference_impl's simulator (both consume an :class:`ArrivalSchedule`).

Three processes, as SGLang's ``bench_serving`` drives them (https://github.com/sgl-project/sglang):

* ``closed``: every request is ready at t=0, at most ``max_concurrency`` in flight
  (``--request-rate inf --max-concurrency N``);
* ``poisson``: one exponential gap of mean ``1/request_rate`` after *each request*, in trace order
  (``--request-rate R``; ``inf`` sends everything at 0), optionally capped by ``max_concurrency``;
* ``trace``: each row at ``(ts - first ts) * slowdown`` (Mooncake's ``--mooncake-slowdown-factor``),
  optionally capped by ``max_concurrency``.

The schedule holds intended times only. The consumer adds what depends on the server: a session's turn t+1 is
sent only after turn t finished, and never more than ``max_concurrency`` requests are in flight.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from workloads.limits import MAX_ARRIVAL_S
from workloads.trace import TraceRow

__all__ = ["LOAD_KINDS", "MAX_ARRIVAL_S", "ArrivalSchedule", "LoadKind", "LoadSpec", "arrival_schedule"]

LoadKind = Literal["closed", "poisson", "trace"]
LOAD_KINDS: tuple[LoadKind, ...] = ("closed", "poisson", "trace")


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """A validated arrival process. ValueError names the field (``max_concurrency``, ...) on bad values."""

    kind: LoadKind = "closed"
    max_concurrency: int | None = None  # closed: required, >= 1; open loops: a cap, None = unbounded
    request_rate: float | None = None  # poisson: requests per second, > 0 (inf: all at once)
    slowdown: float = 1.0  # trace: multiplies the recorded gaps

    def __post_init__(self) -> None:
        if self.kind not in LOAD_KINDS:
            raise ValueError(f"kind: unknown load {self.kind!r}; choose {', '.join(LOAD_KINDS)}")
        if self.kind == "closed" and (self.max_concurrency is None or self.max_concurrency < 1):
            raise ValueError(f"max_concurrency must be >= 1 for a closed loop, got {self.max_concurrency}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 (or unset: no cap), got {self.max_concurrency}")
        rate = self.request_rate
        if self.kind == "poisson" and (rate is None or not rate > 0):  # also refuses NaN
            raise ValueError(f"request_rate must be > 0 for Poisson arrivals, got {rate}")
        if self.kind == "trace" and not (math.isfinite(self.slowdown) and self.slowdown >= 0):
            raise ValueError(f"slowdown must be a finite number >= 0, got {self.slowdown}")

    @staticmethod
    def of(kind: str, max_concurrency: int | None = None, request_rate: float | None = None,
           slowdown: float = 1.0) -> LoadSpec:
        """From unchecked input (a config, a command line): the kind is checked like every field."""
        return LoadSpec(cast(LoadKind, kind), max_concurrency, request_rate, slowdown)


@dataclass(frozen=True, slots=True)
class ArrivalSchedule:
    """Intended send times, one per trace row (in the trace's order), and the in-flight cap."""

    kind: LoadKind
    times_s: tuple[float, ...]
    max_concurrency: int | None  # None: unbounded

    @property
    def closed(self) -> bool:
        """A closed loop intends to send when a slot frees, not at a time of its own."""
        return self.kind == "closed"

    def order(self) -> list[int]:
        """Row indices in send order: by intended time, then trace order."""
        return sorted(range(len(self.times_s)), key=lambda i: (self.times_s[i], i))


def arrival_schedule(rows: Sequence[TraceRow], spec: LoadSpec, seed: int = 0) -> ArrivalSchedule:
    """Deterministic given ``seed`` (only Poisson draws from it)."""
    if spec.kind == "poisson":
        rate = spec.request_rate or math.inf
        rng = random.Random(seed)
        times, t = [], 0.0
        for _ in rows:
            times.append(t)
            if math.isfinite(rate):
                t += rng.expovariate(rate)
    elif spec.kind == "trace":
        base = min((r.ts for r in rows), default=0.0)
        times = [(r.ts - base) * spec.slowdown for r in rows]
    else:
        times = [0.0] * len(rows)
    last = max(times, default=0.0)
    if not last <= MAX_ARRIVAL_S:  # inf and NaN too
        if spec.kind == "poisson":
            raise ValueError(f"request_rate: {spec.request_rate:g} requests/s would send the last of {len(rows):,} "
                             f"requests {last:.3g} s after the first; a schedule may span at most {MAX_ARRIVAL_S:g} s")
        raise ValueError(f"slowdown: the trace's timestamps x {spec.slowdown:g} would send its last request "
                         f"{last:.3g} s after the first; a schedule may span at most {MAX_ARRIVAL_S:g} s")
    return ArrivalSchedule(spec.kind, tuple(times), spec.max_concurrency)
