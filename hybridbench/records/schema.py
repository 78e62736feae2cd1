"""One record per request: the raw facts metrics and checks are computed from (docs/reference/run-files.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from hybridbench.records.typed import checked_fields
from workloads.bench_serving import ServedTiming

__all__ = [
    "DETERMINISTIC_HITS", "LOG_COUNTS_USAGE_HITS", "RECORD_SCHEMA_VERSION", "SAMPLES_WRITTEN", "Record",
    "record_from_json",
]

RECORD_SCHEMA_VERSION = 1
# A trial snapshot key (the run's "server" facts): True when the engine's "#cached-token" log lines count exactly
# what its responses report, so the cache_hits check holds the two totals equal (hybridbench.checks.log_hits).
LOG_COUNTS_USAGE_HITS = "log_counts_usage_hits"
# A trial snapshot key: True when the engine's hits are a function of the trace and the arm alone, so every repeat
# hits the same tokens request by request: the replay engine under a trace load (one request at a time, in the
# trace's timestamp order, through a fresh cache). Modelled records alone say no such thing: the simulator's follow
# each repeat's arrival seed. Absent (older runs, every other engine): not known to be deterministic.
DETERMINISTIC_HITS = "deterministic_hits"
# A trial snapshot key: probe name -> how many samples it wrote to <probe>.jsonl for the trial, so a reader can tell a
# samples file that lost lines (a lost kl.jsonl would otherwise leave its check skipped and the run a pass).
SAMPLES_WRITTEN = "samples_written"

# skipped: never sent, because an earlier turn of its session failed (its prompt would carry an answer the server
# never gave); no send, first-token or end time, 0 prompt tokens, the failed turn named in ``error``.
Status = Literal["ok", "error", "timeout", "server_died", "skipped"]
CacheState = Literal["cold-flushed", "primed", "uncontrolled"]


@dataclass(slots=True)
class Record(ServedTiming):
    run_id: str
    trial_id: str
    arm: str
    workload: str
    repeat: int
    request_index: int
    session_id: int | str
    turn_id: int
    scheduled_s: float  # when the load intended to send it, relative to the trial start
    sent_s: float | None
    first_token_s: float | None
    end_s: float | None
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None  # server-reported (SGLang meta_info.cached_tokens)
    status: Status
    error: str = ""
    itl_ms: list[float] = field(default_factory=list)
    expected_cached_tokens: int | None = None  # what the reference cache predicts, when known
    cache_state: CacheState = "uncontrolled"
    modelled: bool = False  # True for the sim engine: times come from a cost model
    # The reference server's modelled clock (seconds on it; reference_impl/server/modelled.py), beside the measured
    # times above: received, first token, finished. None from every other engine. Modelled, never measured.
    modelled_received_s: float | None = None
    modelled_first_token_s: float | None = None
    modelled_end_s: float | None = None

    @property
    def client_delay_ms(self) -> float | None:
        return None if self.sent_s is None else (self.sent_s - self.scheduled_s) * 1e3

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ttft_ms"] = self.ttft_ms
        out["e2e_ms"] = self.e2e_ms
        out["schema_version"] = RECORD_SCHEMA_VERSION
        return out


_FIELDS = {f.name for f in fields(Record)}


def record_from_json(obj: dict[str, Any]) -> Record:
    return Record(**checked_fields(Record, obj, _FIELDS))
