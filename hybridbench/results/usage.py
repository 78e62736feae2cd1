"""The server's token and mamba usage over time, read from a run's saved server logs (``logs/server-<arm>.log``):
``read_usage(run)``.

Each trial's bundle line names its log and the lines its measured traffic wrote (``log_file``, ``log_lines``,
kept by the server engines since this module exists); a trial's series is the "Prefill batch" / "Decode batch"
lines in that range. A run that kept logs but no ranges (older runs, the real-SGLang recordings) gets one
series per arm over its whole log, warm-up included. Times are the log lines' own timestamps (server local
time; whole seconds on SGLang, milliseconds on the reference server), as seconds since the series' first line.
"Usage" is SGLang's: what running requests pin, evictable cached entries excluded (SGLang's source). With DP
attention every rank logs its own pool; only rank DP0's lines are kept, so one series is one pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hybridbench.errors import ConfigError
from hybridbench.records.server_log import BatchKind, LogSample, parse_sglang_log_line
from hybridbench.results.safe_io import MAX_LOG_BYTES, open_regular
from hybridbench.results.types import Run

__all__ = ["ServerUsage", "UsagePoint", "UsageSeries", "read_usage"]

LOG_DIR = "logs"


@dataclass(frozen=True, slots=True)
class UsagePoint:
    t_s: float  # seconds since the series' first timestamped batch line
    kind: BatchKind
    token_usage: float | None  # "full token usage" (or "token usage" on older builds)
    mamba_usage: float | None  # None on a build or model without a mamba pool


@dataclass(frozen=True, slots=True)
class UsageSeries:
    arm: str
    workload: str  # "" for an arm's whole log
    trial_id: str  # "" for an arm's whole log
    repeat: int
    log_file: str  # relative to the run directory
    lines: tuple[int, int] | None  # [first, end) line numbers (0-based) in log_file; None: the whole log
    points: tuple[UsagePoint, ...]


@dataclass(frozen=True, slots=True)
class ServerUsage:
    series: tuple[UsageSeries, ...]  # only series with at least one point
    note: str  # why nothing (or not everything) is drawn; "" when every series was found

    def of(self, workload: str) -> tuple[UsageSeries, ...]:
        return tuple(s for s in self.series if s.workload == workload)


def _when(sample: LogSample) -> datetime | None:
    if sample.timestamp is None:
        return None
    try:
        return datetime.fromisoformat(sample.timestamp)
    except ValueError:
        return None


def usage_points(lines: list[str]) -> tuple[UsagePoint, ...]:
    """The batch lines among ``lines`` that carry a timestamp and a usage figure (rank DP0's only)."""
    samples = []
    for line in lines:
        s = parse_sglang_log_line(line)
        if s is None or (s.token_usage is None and s.mamba_usage is None) or s.ranks.get("DP", 0) != 0:
            continue
        if (when := _when(s)) is not None:
            samples.append((when, s))
    if not samples:
        return ()
    t0 = samples[0][0]
    return tuple(UsagePoint((when - t0).total_seconds(), s.kind, s.token_usage, s.mamba_usage) for when, s in samples)


def _range(value: object) -> tuple[int, int] | None:
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in value) and 0 <= value[0] <= value[1]):
        return value[0], value[1]
    return None


class _Logs:
    """The run's log files, each read once and split on "\\n" (as the engine counted its line ranges)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir.resolve()
        self.cache: dict[str, list[str] | None] = {}

    def lines(self, rel: str) -> list[str] | None:
        if rel not in self.cache:
            try:
                # Only regular files inside the run directory (a bundle names them, and a bundle is input): a FIFO
                # there hung the dashboard. A log refused or unreadable is a log missing.
                with open_regular(self.run_dir / rel, self.run_dir, limit=MAX_LOG_BYTES) as fh:
                    text: str | None = fh.read().decode("utf-8", "replace")
            except (ConfigError, OSError, ValueError):  # ValueError: a NUL in the bundle's log_file
                text = None
            self.cache[rel] = None if text is None else text.split("\n")
        return self.cache[rel]


def read_usage(run: Run) -> ServerUsage:
    """Every trial's usage series (or, for a run without line ranges, every arm's whole log), and a note saying
    why something is missing: no server log at all (the sim engine, or a run that kept none), or logs without
    batch lines carrying usage (vLLM, TokenSpeed)."""
    logs = _Logs(run.path)
    found: list[UsageSeries] = []
    ranged = False
    for t in run.trials:
        server = t.result.server if t.result is not None else {}
        span, rel = _range(server.get("log_lines")), server.get("log_file")
        if span is None or not isinstance(rel, str):
            continue
        ranged = True
        lines = logs.lines(rel)
        if lines is not None:
            found.append(UsageSeries(t.trial.arm, t.trial.workload, t.trial_id, t.trial.repeat, rel, span,
                                     usage_points(lines[span[0]:span[1]])))
    if not ranged:
        for arm in run.plan.arms:
            rel = f"{LOG_DIR}/server-{arm}.log"
            if (lines := logs.lines(rel)) is not None:
                found.append(UsageSeries(arm, "", "", 0, rel, None, usage_points(lines)))
    drawn = tuple(s for s in found if s.points)
    if not found:
        note = "no server log: this engine runs no server (sim), or the run kept none"
    elif not drawn:
        note = "the server log has no batch lines with token or mamba usage (an engine that does not log them)"
    elif not ranged:
        note = "this run kept no per-trial line ranges: each arm's whole log is drawn, warm-up included"
    else:
        note = ""
    return ServerUsage(drawn, note)
