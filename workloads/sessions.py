"""keep_sessions: send only the first K sessions of a trace, whole, to fit a wall-time budget.

A seed's full load can take longer on a GPU than a nightly or pull-request job has (seglen's SWE-bench traces: over
an hour a trial). The trace is drawn in full first — the same generator, seed and scaling — and then only the
rows of the first ``K`` sessions in order of first appearance (the first to start: traces are sorted by ``ts``)
are kept, every turn of each. So the kept sessions are exactly the full trace's, token for token, and two runs with
one ``K`` send identical requests; a trace file (``.jsonl``) is cut the same way. The metadata records
``keep_sessions: {"kept": k, "of": n}`` (``k`` < ``K`` only when the trace has fewer sessions).
"""

from __future__ import annotations

from typing import Any

from workloads.errors import require
from workloads.trace import TraceRow, TraceStream

__all__ = ["keep_first_sessions"]


def keep_first_sessions(stream: TraceStream, keep: int) -> TraceStream:
    """The rows of the first ``keep`` sessions of ``stream``; the whole stream is read (to count its sessions)."""
    require(keep >= 1, f"keep_sessions must be >= 1 (0 keeps every session), got {keep}")
    kept_ids: set[Any] = set()
    seen: set[Any] = set()
    rows: list[TraceRow] = []
    for row in stream.rows:
        sid = row.session_id
        if sid not in seen:
            seen.add(sid)
            if len(kept_ids) < keep:
                kept_ids.add(sid)
        if sid in kept_ids:
            rows.append(row)
    metadata = {**stream.metadata, "keep_sessions": {"kept": len(kept_ids), "of": len(seen)}}
    return TraceStream(iter(rows), metadata)
