"""What identifies the requests a workload sent: the sha256 of its trace file's bytes. One rule for every reader:
the run records it in plan.json once the trace is written (``WorkloadPlan.trace_sha256``), ``compare`` checks two
runs by it, and ``history`` keys a series by it (generator arguments alone miss a generator changed on main).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hybridbench.errors import ConfigError
from hybridbench.results.safe_io import MAX_LINES_BYTES, open_regular
from hybridbench.results.types import PlannedWorkload, Run

__all__ = ["METADATA_LINE", "file_sha256", "recorded_digest", "saved_trace", "trace_digest"]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def recorded_digest(value: str, where: str) -> str:
    """plan.json's ``trace_sha256`` as read: "" (an older plan) or a sha256; anything else is refused, naming the
    key (history's report and the dashboard print it)."""
    if value and not _SHA256_HEX.fullmatch(value):
        raise ConfigError(f"{where}: trace_sha256 is not a sha256 (64 lowercase hex digits): {value[:80]!r}")
    return value


# workloads.trace.METADATA_KEY, as workloads.generate writes its first line (not imported: it pulls numpy in)
METADATA_LINE = b'{"__trace_metadata__"'


def file_sha256(trace: Path, run_dir: Path) -> str | None:
    """The sha256 of the requests in ``trace``: its bytes after the generator's metadata line, if it has one (that
    line holds the generator's parameters and wording, which may change while every request stays the same: a new
    parameter at a default that changes nothing would have held every nightly series of the generator). None when it
    is not a readable regular file inside ``run_dir`` (the bounded reader's rules: a FIFO, a device or a link out of
    the run is no trace)."""
    try:
        fh = open_regular(trace, run_dir, limit=MAX_LINES_BYTES) if trace.exists() else None
    except ConfigError:
        fh = None
    if fh is None:
        return None
    h = hashlib.sha256()
    with fh:
        first = fh.readline(1 << 20)
        if not (first.startswith(METADATA_LINE) and first.endswith(b"\n")):
            h.update(first)
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def saved_trace(run: Run, w: PlannedWorkload) -> Path:
    """The workload's trace in the run directory itself: a moved or copied run still finds its own."""
    return run.path / "traces" / Path(w.trace_path or f"{w.name}.jsonl").name


def trace_digest(run: Run, w: PlannedWorkload) -> str | None:
    """What the run recorded when it wrote the trace (plan.json); else, for a run from before that, the saved
    trace's bytes; None when neither is there (the requests are then known only by the generator arguments)."""
    return w.trace_sha256 or file_sha256(saved_trace(run, w), run.path)
