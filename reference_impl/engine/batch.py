"""What the engine core schedules: a request as the scheduler holds it, a forward's batch, the core's counters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from reference_impl.lifecycle import CachedRequest

__all__ = ["Batch", "BatchItem", "EngineCounters", "EngineRequest"]


@dataclass(slots=True)
class EngineRequest:
    rid: int
    input_tokens: Sequence[int]  # immutable: a tuple, or a trace's compact TokenIds (4 bytes a token)
    max_new_tokens: int
    output: list[int] = field(default_factory=list)  # tokens sampled so far
    cached: CachedRequest | None = None
    cached_tokens: int | None = None  # reported at first admission (SGLang's meta_info.cached_tokens)
    retractions: int = 0
    status: Literal["waiting", "running", "finished", "aborted"] = "waiting"
    error: str = ""
    max_prefix: int | None = None  # cap on the reusable prefix (return_logprob with logprob_start_len)
    # The prompt as a tuple while the engine works on the request (matching and admission slice tuples), built
    # on first use and dropped when it ends: a queue of compact prompts is never held as Python ints at once.
    prompt_tuple: tuple[int, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def fill_tokens(self) -> Sequence[int]:
        """What a (re-)admission prefills: the prompt plus everything generated so far (the prompt itself, not a
        copy, before any output: callers asking only its length or a prefix match once copied 13K tokens)."""
        if self.output:
            return (*self.input_tokens, *self.output)
        if self.prompt_tuple is None:
            self.prompt_tuple = tuple(self.input_tokens)  # a tuple's tuple() is itself: no copy
        return self.prompt_tuple

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.output)


@dataclass(frozen=True, slots=True)
class BatchItem:
    request: EngineRequest
    start: int  # first token of this forward
    end: int  # one past the last token of this forward
    prefix_len: int  # tokens already in KV before this forward (attention context)


@dataclass(frozen=True, slots=True)
class Batch:
    kind: Literal["prefill", "decode"]
    items: tuple[BatchItem, ...]
    # Whole recurrent-state copies on the device this forward made (LifecycleCounters.state_copies:
    # COW, checkpoint forks, track writes); known once it ran, so the simulator fills it in to time it.
    state_copies: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(i.end - i.start for i in self.items)


@dataclass(slots=True)
class EngineCounters:
    prefill_batches: int = 0
    decode_steps: int = 0
    retractions: int = 0
    aborted: int = 0
    admission_blocked: int = 0  # times the head of the queue waited for memory
    peak_kv_used: int = 0
    peak_states_used: int = 0
