"""generated-shared-prefix (gsp): SGLang bench_serving's GSP dataset, token-level.

Semantics follow ``sglang.benchmark.datasets.generated_shared_prefix`` (https://github.com/sgl-project/sglang):

* lengths come from ``compute_random_lens``: one system length per group, one question length per
  (group, prompt, turn), one output length per (group, prompt), all within ``range_ratio`` bounds;
* every prompt of a group starts with the group's system prompt; turn 0 is ``system + question_0``
  and turn ``t`` is the previous input + the previous (recorded) output + ``question_t``;
* uniform groups repeat each group ``prompts_per_group`` times; zipf draws the group of each of the
  ``num_groups * prompts_per_group`` prompts with weight ``1 / rank**alpha`` (group 0 hottest) and keeps
  the question pool unchanged;
* the prompts are shuffled with the seed unless ``ordered``.

Token-level differences from SGLang: ids are drawn directly (no decode/re-encode drift, like 0.5.23's
``--tokenize-prompt``) and there is no ``"\\n\\n"`` separator. The first question token of every prompt
that shares a system prompt is distinct, so prompts of a group share *exactly* the system prompt.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from workloads.errors import require
from workloads.limits import check_size
from workloads.params import param
from workloads.sampling import compute_random_lens, distinct_tokens, random_tokens
from workloads.trace import TraceRow, TraceStream

__all__ = ["PRESETS", "GspParams", "build", "generate_gsp"]

GroupDistribution = Literal["uniform", "zipf"]


@dataclass(frozen=True, slots=True)
class GspParams:
    """SGLang's ``--gsp-*`` arguments; defaults are SGLang's ``cli_main`` defaults."""

    num_groups: int = param(64, "groups (distinct system prompts)")
    prompts_per_group: int = param(16, "prompts per group")
    system_prompt_len: int = param(2048, "system prompt tokens")
    question_len: int = param(128, "question tokens per turn")
    output_len: int = param(256, "output tokens per turn")
    range_ratio: float = param(1.0, "lengths in [len*ratio, len] (1.0: exact)")
    num_turns: int = param(1, "turns per prompt")
    ordered: bool = param(False, "do not shuffle the prompts")
    group_distribution: GroupDistribution = param("uniform", "how prompts pick their group")  # noqa: RUF009
    zipf_alpha: float | None = param(None, "zipf exponent (required for zipf)")

    def validate(self) -> None:
        require(self.num_groups >= 1, f"num_groups must be >= 1, got {self.num_groups}")
        require(self.prompts_per_group >= 1, f"prompts_per_group must be >= 1, got {self.prompts_per_group}")
        require(self.num_turns >= 1, f"num_turns must be >= 1, got {self.num_turns}")
        for name in ("system_prompt_len", "question_len", "output_len"):
            value = getattr(self, name)
            require(value >= 0, f"{name} must be >= 0, got {value}")
        require(self.system_prompt_len + self.question_len >= 1,
                "system_prompt_len + question_len must be >= 1 (every prompt needs a token), "
                f"got {self.system_prompt_len} + {self.question_len}")
        require(0.0 <= self.range_ratio <= 1.0, f"range_ratio must be in [0, 1], got {self.range_ratio}")
        prompts, turns = self.num_groups * self.prompts_per_group, self.num_turns
        # turn t's input is the system prompt, t + 1 questions and t outputs (lengths at most the given ones)
        per_prompt = (turns * self.system_prompt_len + self.question_len * turns * (turns + 1) // 2
                      + self.output_len * turns * (turns - 1) // 2 + turns * self.output_len)
        check_size(prompts * turns, prompts * per_prompt, "num_groups * prompts_per_group * num_turns",
                   "num_groups * prompts_per_group * (system_prompt_len, question_len, output_len, num_turns)")
        if self.group_distribution == "zipf":
            alpha = self.zipf_alpha
            require(
                alpha is not None and math.isfinite(alpha) and alpha > 0,
                f"zipf group distribution needs a finite zipf_alpha > 0, got {alpha}",
            )
        else:
            dist = self.group_distribution
            require(dist == "uniform", f"unknown group distribution {dist!r}")
            require(self.zipf_alpha is None, "zipf_alpha is only allowed with the zipf group distribution")


PRESETS: dict[str, GspParams] = {
    # SGLang bench_serving defaults.
    "sglang-default": GspParams(),
    # The mamba radix-cache run of SGLang #11214 / #13584 (50 groups x 10 prompts).
    "radix": GspParams(num_groups=50, prompts_per_group=10, system_prompt_len=10240, question_len=256, output_len=128),
    # The high-token-usage run (8 groups x 128 prompts).
    "high-token-usage": GspParams(
        num_groups=8, prompts_per_group=128, system_prompt_len=1000, question_len=2744, output_len=820
    ),
}


def _zipf_weight(rank: int, alpha: float) -> float:
    """``1 / rank**alpha``; 0 where ``rank**alpha`` is past a float (``--zipf-alpha 1100`` raised OverflowError, a
    traceback): the weight is then below any float, and group 0 (weight 1) takes every prompt. The same float as
    before wherever it was one, so seeded traces stay byte-identical."""
    try:
        return 1.0 / float(rank**alpha)
    except OverflowError:
        return 0.0


def _group_of_prompts(params: GspParams, rng: random.Random) -> list[int]:
    g, p = params.num_groups, params.prompts_per_group
    if params.group_distribution == "uniform":
        return [i // p for i in range(g * p)]
    alpha = params.zipf_alpha
    assert alpha is not None  # validate() guarantees it
    weights = [_zipf_weight(rank, alpha) for rank in range(1, g + 1)]
    return rng.choices(range(g), weights=weights, k=g * p)


def _prefixed(first: int, rng: random.Random, n: int, vocab_size: int) -> tuple[int, ...]:
    """``n`` random tokens whose first one is ``first`` (empty when ``n == 0``)."""
    if n <= 0:
        return ()
    return (first, *random_tokens(rng, n - 1, vocab_size))


def generate_gsp(params: GspParams, vocab_size: int, seed: int, preset: str | None = None) -> TraceStream:
    """The GSP trace: one session per prompt (``session_id`` = pool index), ``group`` as an extra field."""
    params.validate()
    require(vocab_size >= 1, f"vocab size must be >= 1, got {vocab_size}")
    rng = random.Random(seed)
    g_count, p_count, t_count = params.num_groups, params.prompts_per_group, params.num_turns
    n_prompts = g_count * p_count

    sys_lens = compute_random_lens(params.system_prompt_len, params.range_ratio, g_count, rng)
    q_lens = compute_random_lens(params.question_len, params.range_ratio, n_prompts * t_count, rng)
    out_lens = compute_random_lens(params.output_len, params.range_ratio, n_prompts, rng)
    groups = _group_of_prompts(params, rng)

    sys_first = (
        distinct_tokens(rng, g_count, vocab_size, "system prompts (one per group)")
        if params.system_prompt_len > 0
        else [0] * g_count
    )
    system_prompts = [_prefixed(sys_first[g], rng, sys_lens[g], vocab_size) for g in range(g_count)]
    # Turn-0 questions sharing a system prompt start with distinct tokens: the prompts of a group then
    # share exactly the system prompt. Under zipf any prompt may land in any group, so all are distinct.
    if params.group_distribution == "uniform":
        q_first: list[int] = []
        for _ in range(g_count):
            q_first += distinct_tokens(rng, p_count, vocab_size, "questions per group")
    else:
        q_first = distinct_tokens(rng, n_prompts, vocab_size, "questions (zipf: all prompts)")
    questions = [
        [
            _prefixed(q_first[i] if t == 0 else rng.randrange(vocab_size), rng, q_lens[i * t_count + t], vocab_size)
            for t in range(t_count)
        ]
        for i in range(n_prompts)
    ]
    outputs = [[random_tokens(rng, out_lens[i], vocab_size) for _ in range(t_count)] for i in range(n_prompts)]

    order = list(range(n_prompts))
    if not params.ordered:
        rng.shuffle(order)

    def rows() -> Iterator[TraceRow]:
        for i in order:
            history: tuple[int, ...] = system_prompts[groups[i]]
            for t in range(t_count):
                inputs = history + questions[i][t]
                yield TraceRow(i, t, 0.0, inputs, outputs[i][t], {"group": groups[i]})
                history = inputs + outputs[i][t]

    metadata: dict[str, Any] = {
        "generator": "gsp",
        "semantics": "sglang bench_serving generated-shared-prefix, token-level",
        "preset": preset,
        "params": asdict(params),
        "seed": seed,
        "vocab_size": vocab_size,
        "synthetic": False,
    }
    return TraceStream(rows(), metadata)


def build(params: GspParams, source: None, vocab_size: int, seed: int, preset: str | None) -> TraceStream:
    """The registry's entry point (``workloads.registry``)."""
    return generate_gsp(params, vocab_size, seed, preset)
