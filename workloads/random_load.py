"""random: independent random prompts (SGLang bench_serving ``random`` / ``random-ids``, token-level).

Lengths follow SGLang's ``compute_random_lens`` with ``--random-range-ratio`` (default 0.0, i.e. uniform
in ``[1, len]``; 1.0 gives exact lengths). Every prompt starts with a distinct token, so no two
prompts share a prefix: the load measures pure prefill and radix-cache bookkeeping overhead.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from workloads.errors import require
from workloads.limits import check_size
from workloads.params import param
from workloads.sampling import compute_random_lens, distinct_tokens, random_tokens
from workloads.trace import TraceRow, TraceStream

__all__ = ["PRESETS", "RandomParams", "build", "generate_random"]


@dataclass(frozen=True, slots=True)
class RandomParams:
    """SGLang's ``--num-prompts`` and ``--random-{input-len,output-len,range-ratio}``."""

    num_prompts: int = param(1000, "prompts")
    input_len: int = param(1024, "input tokens")
    output_len: int = param(1024, "output tokens")
    range_ratio: float = param(0.0, "lengths uniform in [len*ratio, len]")

    def validate(self) -> None:
        require(self.num_prompts >= 1, f"num_prompts must be >= 1, got {self.num_prompts}")
        require(self.input_len >= 1, f"input_len must be >= 1, got {self.input_len}")
        require(self.output_len >= 0, f"output_len must be >= 0, got {self.output_len}")
        require(0.0 <= self.range_ratio <= 1.0, f"range_ratio must be in [0, 1], got {self.range_ratio}")
        check_size(self.num_prompts, self.num_prompts * (self.input_len + self.output_len), "num_prompts",
                   "num_prompts * (input_len + output_len)")


PRESETS: dict[str, RandomParams] = {
    "sglang-default": RandomParams(),
    # The mamba radix-cache prefill-overhead run (SGLang #11214): 50 x 20480 in, 1 out, exact lengths.
    "prefill-overhead": RandomParams(num_prompts=50, input_len=20480, output_len=1, range_ratio=1.0),
}


def generate_random(params: RandomParams, vocab_size: int, seed: int, preset: str | None = None) -> TraceStream:
    """One single-turn session per prompt, all with ``ts = 0``."""
    params.validate()
    require(vocab_size >= 1, f"vocab size must be >= 1, got {vocab_size}")
    rng = random.Random(seed)
    n = params.num_prompts
    in_lens = compute_random_lens(params.input_len, params.range_ratio, n, rng)
    out_lens = compute_random_lens(params.output_len, params.range_ratio, n, rng)
    firsts = distinct_tokens(rng, n, vocab_size, "random prompts")

    def rows() -> Iterator[TraceRow]:
        for i in range(n):
            inputs = (firsts[i], *random_tokens(rng, in_lens[i] - 1, vocab_size))
            yield TraceRow(i, 0, 0.0, inputs, random_tokens(rng, out_lens[i], vocab_size))

    metadata: dict[str, Any] = {
        "generator": "random",
        "semantics": "sglang bench_serving random/random-ids, token-level, no shared prefixes",
        "preset": preset,
        "params": asdict(params),
        "seed": seed,
        "vocab_size": vocab_size,
        "synthetic": False,
    }
    return TraceStream(rows(), metadata)


def build(params: RandomParams, source: None, vocab_size: int, seed: int, preset: str | None) -> TraceStream:
    """The registry's entry point (``workloads.registry``)."""
    return generate_random(params, vocab_size, seed, preset)
