"""The reference server's modelled clock: what each forward would take by a cost model, not by the wall clock.

Two shared CPU cores make the wall time of a forward swing with whatever else the machine runs (a paired
per-repeat log-ratio sd of ~0.23 between two arms of one run), which no three-repeat interval can decide at a
10% tolerance. The model thread therefore also keeps a clock that advances by each forward's *modelled* time —
a linear cost model of this tiny model on a CPU (``CPU_COSTS``) — and stamps every request with it: received,
first token, finished (``meta_info.modelled_*``, seconds on the server's modelled clock). What a cache changes
(tokens prefilled, attention context, state copies, batching) moves the modelled clock exactly as it moves the
work; what the machine's load changes does not. Batch composition follows the real arrivals unless the server waits
for a closed loop's next requests (``--modelled-lockstep-ms``, engine_loop.py). Every such number is *modelled*,
and labelled so (as the simulator's records are).

``--prefill-slowdown F`` plants a regression: every prefill forward takes ``1 + F`` times as long, on both
clocks (the wall clock by sleeping ``F`` times the forward's own time after it), so a benchmark can show that
its TTFT check fails on a known slowdown.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.engine.core import Batch

__all__ = ["CPU_COSTS", "ModelledClock", "ModelledCosts"]


@dataclass(frozen=True, slots=True)
class ModelledCosts:
    prefill_fixed_s: float  # per prefill forward
    prefill_token_s: float  # per new token (projections, recurrences, MLP)
    prefill_attended_s: float  # per (new token, attended key) pair: causal attention against the context
    decode_fixed_s: float  # per decode step
    decode_seq_s: float  # per running request in the step
    decode_context_s: float  # per context token a decode step attends to
    state_copy_s: float  # per whole recurrent-state copy (COW, checkpoint, track write)


# The tiny RRRA model (hidden 64, vocab 4096) in float32 on a CPU, to its order of magnitude: ~1.5K prefill tokens/s
# (conf/engine/reference.yaml's sizing note), so 0.6 ms a token, and a decode step of a few ms at the experiments'
# batch sizes. The verdicts judge relative changes between arms on one clock, so what matters is the proportion of
# prefill, attention context and decode, not the absolute scale; the wall clock stays in every record beside it.
CPU_COSTS = ModelledCosts(prefill_fixed_s=1.5e-3, prefill_token_s=6.0e-4, prefill_attended_s=2.0e-8,
                          decode_fixed_s=1.2e-3, decode_seq_s=2.0e-4, decode_context_s=1.0e-7,
                          state_copy_s=2.0e-5)


class ModelledClock:
    """Seconds on the modelled clock; moved only by the model thread, one forward at a time."""

    def __init__(self, costs: ModelledCosts = CPU_COSTS, prefill_slowdown: float = 0.0) -> None:
        self.costs = costs
        self.prefill_slowdown = prefill_slowdown
        self.now = 0.0

    def forward_s(self, batch: Batch, extra_copies: int = 0, copy_s: float = 0.0) -> float:
        """The modelled time of one forward; ``extra_copies`` more copies charged ``copy_s`` each (the
        copy_every_chunk fault's whole-buffer copies, priced as the executor prices them)."""
        c = self.costs
        copies = batch.state_copies * c.state_copy_s + extra_copies * copy_s
        if batch.kind == "prefill":
            t = c.prefill_fixed_s
            for i in batch.items:
                new = i.end - i.start
                t += new * c.prefill_token_s + new * (i.prefix_len + (new + 1) / 2) * c.prefill_attended_s
            return (t + copies) * (1.0 + self.prefill_slowdown)
        context = sum(i.end for i in batch.items)
        return c.decode_fixed_s + len(batch.items) * c.decode_seq_s + context * c.decode_context_s + copies

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

    def chunk_forward_s(self, tokens: int, prefix_len: int) -> float:
        """One prefill chunk's modelled forward (without the fixed cost): what the fault's copies are priced by."""
        c = self.costs
        return tokens * c.prefill_token_s + tokens * (prefix_len + (tokens + 1) / 2) * c.prefill_attended_s
