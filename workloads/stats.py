"""python -m workloads.stats TRACE.jsonl [--json]: what a trace asks of a prefix cache.

Reports sessions, turns, input/output token distributions and the shared-prefix structure: the
*ideal hit rate*, i.e. what a cache of infinite size would reuse when the trace is replayed in file
order as Marconi's simulator does: for each request, the longest prefix of its input that is a prefix
of some earlier request's input + output, summed over requests and divided by all input tokens.
Synthetic stand-ins for real datasets are labelled in the first line of the report.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from workloads.cli import OneLineArgumentParser, run_cli
from workloads.prefix_tree import PrefixTree, pack_tokens
from workloads.token_ids import largest_id
from workloads.trace import TraceError, TraceRow, iter_trace

__all__ = ["Distribution", "TraceStats", "compute_stats", "format_stats", "ideal_hits", "main", "percentile",
           "percentiles"]


@dataclass(frozen=True, slots=True)
class Distribution:
    count: int
    total: int
    mean: float
    min: int
    p50: float
    p90: float
    p95: float
    p99: float
    max: int

    @classmethod
    def of(cls, values: Sequence[int]) -> Distribution:
        if not values:
            return cls(0, 0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0)
        s = sorted(values)
        return cls(len(s), sum(s), sum(s) / len(s), s[0], _pct(s, 50), _pct(s, 90), _pct(s, 95), _pct(s, 99), s[-1])


def percentile(values: Sequence[float], q: float) -> float:
    """numpy.percentile(values, q) (linear interpolation) without numpy; NaN for no values. The one copy
    the whole project uses: bench_serving reports its percentiles this way."""
    return _pct(sorted(values), q) if values else math.nan


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """``[percentile(values, q) for q in qs]``, sorting once (a simulated run has about a million ITLs)."""
    if not values:
        return [math.nan for _ in qs]
    s = sorted(values)
    return [_pct(s, q) for q in qs]


def _pct(s: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of sorted ``s`` (numpy's default method)."""
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class TraceStats:
    rows: int
    sessions: int
    turns_per_session: Distribution
    input_tokens: Distribution
    output_tokens: Distribution
    shareable_tokens: int  # sum over requests of the ideal cached prefix
    ideal_hit_rate: float  # shareable_tokens / input tokens
    request_hit_rate: float  # fraction of requests with a non-empty ideal cached prefix
    stored_tokens: int  # distinct prefixes: what an infinite cache ends up holding
    max_token_id: int
    ts_span_s: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


def ideal_hits(rows: Iterable[TraceRow]) -> list[int]:
    """Per request, in order: the longest input prefix found in an earlier request's input + output."""
    tree = PrefixTree()
    hits = []
    for row in rows:
        hits.append(tree.match(pack_tokens(row.input_tokens)))
        tree.insert(pack_tokens(row.input_tokens + row.output_tokens))
    return hits


def compute_stats(items: Iterable[TraceRow | dict[str, Any]], source: str = "trace") -> TraceStats:
    """Stats of a trace given as ``iter_trace`` items (metadata dict, then rows); streams the rows."""
    tree = PrefixTree()
    metadata: dict[str, Any] = {}
    turns: dict[int | str, int] = {}
    in_lens: list[int] = []
    out_lens: list[int] = []
    shareable = hit_requests = max_id = 0
    ts_min, ts_max = math.inf, -math.inf
    for item in items:
        if not isinstance(item, TraceRow):
            metadata = item
            continue
        row = item
        turns[row.session_id] = turns.get(row.session_id, 0) + 1
        in_lens.append(row.num_input_tokens)
        out_lens.append(row.num_output_tokens)
        seq = row.input_tokens + row.output_tokens
        if seq:
            max_id = max(max_id, largest_id(seq))
            if max_id >= 2**32:
                raise TraceError(f"{source}: token id {max_id} does not fit in 32 bits")
        hit = tree.match(pack_tokens(row.input_tokens))
        shareable += hit
        hit_requests += hit > 0
        tree.insert(pack_tokens(seq))
        ts_min, ts_max = min(ts_min, row.ts), max(ts_max, row.ts)
    if not in_lens:
        raise TraceError(f"{source}: the trace has no rows")
    total_in = sum(in_lens)
    return TraceStats(
        rows=len(in_lens),
        sessions=len(turns),
        turns_per_session=Distribution.of(list(turns.values())),
        input_tokens=Distribution.of(in_lens),
        output_tokens=Distribution.of(out_lens),
        shareable_tokens=shareable,
        ideal_hit_rate=shareable / total_in if total_in else 0.0,
        request_hit_rate=hit_requests / len(in_lens),
        stored_tokens=tree.stored_tokens,
        max_token_id=max_id,
        ts_span_s=ts_max - ts_min,
        metadata=metadata,
    )


def _dist_line(name: str, d: Distribution) -> str:
    return (
        f"{name:<18} total {d.total:>12,}  mean {d.mean:9.1f}  min {d.min:>6,}  p50 {d.p50:8.1f}"
        f"  p90 {d.p90:8.1f}  p95 {d.p95:8.1f}  p99 {d.p99:8.1f}  max {d.max:>6,}"
    )


def format_stats(path: str, st: TraceStats) -> str:
    meta = st.metadata
    lines = []
    if meta.get("synthetic"):
        lines.append(f"SYNTHETIC TRACE ({meta.get('source', 'synthetic stand-in')}): not real data")
    lines.append(f"trace              {path}")
    if meta:
        params = meta.get("params")
        gen = f"{meta.get('generator', '?')}" + (f" preset={meta['preset']}" if meta.get("preset") else "")
        lines.append(f"generator          {gen} seed={meta.get('seed')} vocab_size={meta.get('vocab_size')}")
        if params:
            lines.append(f"params             {json.dumps(params, sort_keys=True)}")
        if meta.get("scale"):
            lines.append(f"scaled             {json.dumps(meta['scale'], sort_keys=True)}")
    else:
        lines.append("generator          (no metadata line: e.g. a Marconi/SegLen trace)")
    t = st.turns_per_session
    lines.append(f"requests           {st.rows:,} in {st.sessions:,} sessions, ts span {st.ts_span_s:.1f} s")
    lines.append(f"turns/session      mean {t.mean:.2f}  min {t.min}  p50 {t.p50:.1f}  max {t.max}")
    lines.append(_dist_line("input tokens", st.input_tokens))
    lines.append(_dist_line("output tokens", st.output_tokens))
    lines.append(
        f"shareable tokens   {st.shareable_tokens:,} of {st.input_tokens.total:,} input tokens"
        f" (ideal hit rate {100 * st.ideal_hit_rate:.2f}%, infinite cache, file order)"
    )
    lines.append(f"requests with hit  {100 * st.request_hit_rate:.2f}%")
    lines.append(f"distinct prefixes  {st.stored_tokens:,} tokens held by an infinite cache")
    vocab = meta.get("vocab_size")
    lines.append(f"max token id       {st.max_token_id:,}" + (f" (vocab_size {vocab})" if vocab else ""))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m workloads.stats", description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="trace JSONL")
    parser.add_argument("--json", action="store_true", help="print the stats as one JSON object")
    args: argparse.Namespace = parser.parse_args(argv)
    stats = compute_stats(iter_trace(args.trace), args.trace)
    if args.json:
        print(json.dumps({"trace": args.trace, **asdict(stats)}, sort_keys=True))
    else:
        print(format_stats(args.trace, stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m workloads.stats"))
