"""random: independent random prompts (SGLang bench_serving ``random`` / ``random-ids``, token-level).

Lengths follow SGLang's ``compute_random_lens`` with ``--random-range-ratio`` (default 0.0, i.e. uniform
in ``[1, len]``; 1.0 gives exact lengths). Every prompt starts with a distinct token, so no two
prompts share a prefix: the load measures pure prefill and radix-cache bookkeeping overhead.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from workloads.errors import require
from workloads.sampling import compute_random_lens, distinct_tokens, random_tokens
from workloads.trace import TraceRow, TraceStream

__all__ = ["PRESETS", "RandomParams", "add_arguments", "from_args", "generate_random"]


@dataclass(frozen=True, slots=True)
class RandomParams:
    """SGLang's ``--num-prompts`` and ``--random-{input-len,output-len,range-ratio}``."""

    num_prompts: int = 1000
    input_len: int = 1024
    output_len: int = 1024
    range_ratio: float = 0.0

    def validate(self) -> None:
        require(self.num_prompts >= 1, f"num_prompts must be >= 1, got {self.num_prompts}")
        require(self.input_len >= 1, f"input_len must be >= 1, got {self.input_len}")
        require(self.output_len >= 0, f"output_len must be >= 0, got {self.output_len}")
        require(0.0 <= self.range_ratio <= 1.0, f"range_ratio must be in [0, 1], got {self.range_ratio}")


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a seed load; options override it")
    parser.add_argument("--num-prompts", type=int, help="prompts; default 1000")
    parser.add_argument("--input-len", type=int, help="input tokens; default 1024")
    parser.add_argument("--output-len", type=int, help="output tokens; default 1024")
    parser.add_argument("--range-ratio", type=float, help="lengths uniform in [len*ratio, len]; default 0.0")


def from_args(args: argparse.Namespace, vocab_size: int, seed: int) -> TraceStream:
    preset: str | None = args.preset
    params = PRESETS[preset] if preset else RandomParams()
    names = ("num_prompts", "input_len", "output_len", "range_ratio")
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return generate_random(replace(params, **overrides), vocab_size, seed, preset)
