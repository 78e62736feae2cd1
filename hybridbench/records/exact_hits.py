"""One exact-hit sample per predicted request: what the reference cache says its ``cached_tokens`` must be.

Written by the ``exact_hits`` probe (hybridbench/probes/exact_hits.py) to exact_hits.jsonl, read by the
``cache_hits`` check (its ``<workload>/exact`` rows), joined with the records on (trial_id, request_index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from hybridbench.records.typed import checked_fields

__all__ = ["EXACT_HITS_SAMPLES", "NOT_PREDICTABLE", "ExactHitSample", "exact_hit_sample_from_json"]

EXACT_HITS_SAMPLES = "exact_hits.jsonl"
# How a trial snapshot's ``prediction`` begins where the probe predicts nothing by design (an engine or arm the
# reference cache does not mirror, a warm start): the cache_hits check says so in a skip row. Any other reason
# but "exact" is a probe that was to predict and could not (/server_info unreadable, a mirror broken at the first
# request): the exact verdict is then undecided, never left out.
NOT_PREDICTABLE = ("no prediction", "no cache semantics proven", "the reference cache cannot mirror arm",
                   "a host tier's asynchronous write-back")


@dataclass(frozen=True, slots=True)
class ExactHitSample:
    trial_id: str
    arm: str
    workload: str
    repeat: int
    request_index: int
    expected_cached_tokens: int  # what the reference cache says the server must report

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = tuple(f.name for f in fields(ExactHitSample))


def exact_hit_sample_from_json(obj: dict[str, Any]) -> ExactHitSample:
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise TypeError(f"missing {', '.join(missing)}")
    return ExactHitSample(**checked_fields(ExactHitSample, obj, _FIELDS))
