"""Whether a completed record's times can be believed: one rule for the run's checks and for compare.

A record that says ``ok`` with no end time, or an end before its send (a driver that lost a stamp, a clock stepped
back), counted as completed inside a trial duration that never saw it: throughput rose, and TTFT, throughput and
survival passed on times nobody measured. Its timing is unknown, and so is whether it completed.
"""

from __future__ import annotations

from collections.abc import Iterable

from hybridbench.records.schema import Record

__all__ = ["untimed", "untimed_detail"]


def untimed(records: Iterable[Record]) -> list[Record]:
    """Completed records without a send and an end time in order, or with a first token outside them."""
    out = []
    for r in records:
        if r.status != "ok":
            continue
        sent, first, end = r.sent_s, r.first_token_s, r.end_s
        if sent is None or end is None or end < sent or (first is not None and not sent <= first <= end):
            out.append(r)
    return out


def untimed_detail(bad: list[Record], *, who: str = "") -> str:
    """``N [who ]completed request(s) with no end time, or one before their send (the first one): ...``."""
    r = bad[0]
    return (f"{len(bad)} {who + ' ' if who else ''}completed request(s) with no end time, or one before their send "
            f"(request {r.request_index} r{r.repeat}: sent {r.sent_s}, first token {r.first_token_s}, end {r.end_s})"
            ": their timing and completion are unknown")
