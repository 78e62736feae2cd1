"""A KV pool the plan fixes, and the plan-time refusal of a workload with a request that cannot fit it alone, or
that is longer than the server's context length (the reference server caps it at 32,768 tokens, below a larger
pool, and answers such a request 400 mid-run).

The simulator and the reference server reject such a request on arrival, so every one of them would fail at
run time and the run report survival failures for a configuration error. GPU servers size their pools at
launch: their engines fix no pool here and nothing is refused for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hybridbench.errors import ConfigError
from reference_impl.engine.config import fits_kv_pool
from workloads.trace import TraceRow

__all__ = ["KVPool", "refuse_unfit_requests"]


@dataclass(frozen=True, slots=True)
class KVPool:
    tokens: int  # the smallest KV pool of the run's arms, in tokens
    key: str  # what sets it, for the refusal: "engine.kv_tokens", or how the memory model sized it
    context: int = 0  # the server's context length when below the pool (prompt + new tokens); 0 = the pool's
    context_key: str = ""  # what sets the context length, for the refusal


def _need(row: TraceRow) -> int:
    """The request's input plus the new tokens it asks for, as the load driver and the simulator send it."""
    return row.num_input_tokens + max(1, row.num_output_tokens)


def _unfit(rows: Sequence[TraceRow], limit: int) -> tuple[int, TraceRow] | None:
    """How many of ``rows`` need more than ``limit`` tokens at once, and the longest of them."""
    unfit = [r for r in rows if not fits_kv_pool(r.num_input_tokens, r.num_output_tokens, limit)]
    return (len(unfit), max(unfit, key=_need)) if unfit else None


def _sizes(row: TraceRow, unit: str) -> str:
    return f"{_need(row)} {unit} ({row.num_input_tokens} input + {max(1, row.num_output_tokens)} new)"


def refuse_unfit_requests(engine: str, pool: KVPool, traces: Mapping[str, Sequence[TraceRow]]) -> None:
    """ConfigError naming the first workload whose longest request cannot fit ``pool`` by itself, or is longer
    than the server's context length."""
    for name, rows in traces.items():
        if found := _unfit(rows, pool.tokens):
            n, longest = found
            raise ConfigError(
                f"workloads.{name}: {n} of {len(rows)} requests cannot fit the KV pool alone; the longest "
                f"needs {_sizes(longest, 'KV tokens')} but engine {engine}'s KV pool holds {pool.tokens} "
                f"({pool.key}), so the engine would reject them: raise the pool or shrink the workload"
            )
        if pool.context and pool.context < pool.tokens and (found := _unfit(rows, pool.context)):
            n, longest = found
            raise ConfigError(
                f"workloads.{name}: {n} of {len(rows)} requests are longer than the context length; the "
                f"longest needs {_sizes(longest, 'tokens')} but engine {engine}'s context "
                f"length is {pool.context} ({pool.context_key}), so the server would refuse them: raise it or "
                f"shrink the workload"
            )
