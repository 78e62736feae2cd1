"""How much one workload may generate: a cap on requests and on tokens, checked from the parameters before any
row is drawn (``num_groups=100000000`` used to run the generator to 12 GB of memory and no output).

The caps are far above any shipped experiment: the largest generated workloads are ``prefix_groups``'
multi-group (2,760 requests) and ``gsp_prefix_heavy`` (1,024 requests, ~8.8M tokens); the largest synthetic
session count is 200. Traces read from files (ShareGPT, SWE-bench trajectories, trace .jsonl) are bounded by
their files and not capped here.
"""

from __future__ import annotations

from workloads.errors import require

__all__ = ["MAX_REQUESTS", "MAX_SESSIONS", "MAX_TOKENS", "check_sessions", "check_size"]

MAX_REQUESTS = 1_000_000  # rows (requests) one workload may generate
MAX_TOKENS = 200_000_000  # input + output tokens summed over the rows
MAX_SESSIONS = 100_000  # synthetic sessions (ShareGPT, SWE-bench), drawn before their rows


def check_size(requests: int, tokens: int, requests_from: str, tokens_from: str) -> None:
    """Refuse a workload over the caps; ``*_from`` name the parameters the counts come from."""
    require(requests <= MAX_REQUESTS,
            f"{requests_from} = {requests:,} requests; one workload may generate at most {MAX_REQUESTS:,}")
    require(tokens <= MAX_TOKENS,
            f"{tokens_from}: up to {tokens:,} tokens; one workload may generate at most {MAX_TOKENS:,}")


def check_sessions(num_sessions: int) -> None:
    """Refuse more synthetic sessions than the cap (each is drawn, whole, before the first row)."""
    require(num_sessions <= MAX_SESSIONS,
            f"num_sessions = {num_sessions:,} synthetic sessions; one workload may generate at most {MAX_SESSIONS:,}")
