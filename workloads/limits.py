"""How much one workload may generate: a cap on requests and on tokens, checked from the parameters before any
row is drawn (``num_groups=100000000`` used to run the generator to 12 GB of memory and no output).

The caps are far above any shipped experiment: the largest generated workloads are ``prefix_groups``'
multi-group (2,760 requests) and ``gsp_prefix_heavy`` (1,024 requests, ~8.8M tokens); the largest synthetic
session count is 200. Synthetic ShareGPT and SWE-bench sessions are checked twice: by the size their length model's
means give, before the first draw (drawing runs at about a million tokens a second), and exactly, from the drawn
lengths, before the first row. Multi-turn rows re-send their conversation, so what a ShareGPT file's sessions send
is checked too; trace .jsonl files and trajectory files are bounded by their files.
"""

from __future__ import annotations

from workloads.errors import require

__all__ = ["MAX_ARRIVAL_S", "MAX_REQUESTS", "MAX_SESSIONS", "MAX_STREAMED_TOKENS", "MAX_TOKENS", "check_expected",
           "check_sessions", "check_size", "check_start_span"]

MAX_REQUESTS = 1_000_000  # rows (requests) one workload may generate
# The latest intended send time a schedule (workloads.arrival) or a trace's timestamps may hold, in seconds after the
# first (about 31.7 years): far beyond any load, and small enough that every consumer can hold it (the simulator's
# clock counts integer nanoseconds, and 1e9 s is 1e18 ns, inside int64). ``load.slowdown=1e300`` or a rate of
# 1e-300/s used to overflow there: a traceback from ``hybridbench plan``, an "internal OverflowError" (exit 3).
MAX_ARRIVAL_S = 1e9
MAX_TOKENS = 200_000_000  # input + output tokens summed over the rows
MAX_SESSIONS = 100_000  # synthetic sessions (ShareGPT, SWE-bench), drawn before their rows
# Rows written one at a time as they are built (SWE-bench's) cost disk and time, not memory: 2 billion tokens is
# ~16 GB of JSONL, ~4,500 sessions of the seglen preset's shape.
MAX_STREAMED_TOKENS = 10 * MAX_TOKENS


def check_size(requests: int, tokens: int, requests_from: str, tokens_from: str, token_cap: int = MAX_TOKENS) -> None:
    """Refuse a workload over the caps; ``*_from`` name the parameters the counts come from."""
    require(requests <= MAX_REQUESTS,
            f"{requests_from} = {requests:,} requests; one workload may generate at most {MAX_REQUESTS:,}")
    require(tokens <= token_cap,
            f"{tokens_from}: up to {tokens:,} tokens; one workload may generate at most {token_cap:,}")


def check_sessions(num_sessions: int) -> None:
    """Refuse more synthetic sessions than the cap (each is drawn, whole, before the first row)."""
    require(num_sessions <= MAX_SESSIONS,
            f"num_sessions = {num_sessions:,} synthetic sessions; one workload may generate at most {MAX_SESSIONS:,}")


def check_expected(tokens: float, what: str, cap: int = MAX_TOKENS) -> None:
    """Refuse a synthetic workload whose expected size (from its length model's means, before any draw) is over
    ``cap``; ``what`` names the parameters and says what the tokens are."""
    require(tokens <= cap, f"{what} about {tokens:,.0f} tokens; one workload may generate at most {cap:,}")


def check_start_span(num_sessions: int, sps: float) -> None:
    """Refuse an ``sps`` so small that the last session would start past what a schedule may span
    (``MAX_ARRIVAL_S``): ``--sps 1e-320`` wrote ``"ts": Infinity`` rows (not JSON; the trace readers refuse them)
    and exit 0."""
    last = (num_sessions - 1) / sps
    require(last <= MAX_ARRIVAL_S, f"sps = {sps:g} would start session {num_sessions - 1:,} {last:.3g} s after the "
                                   f"first; a trace may span at most {MAX_ARRIVAL_S:g} s (raise sps)")
