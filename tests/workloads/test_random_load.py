"""random: SGLang random lengths, no shared prefixes."""

from __future__ import annotations

import itertools

import pytest

from workloads.errors import WorkloadError
from workloads.random_load import PRESETS, RandomParams, generate_random


def test_exact_and_ranged_lengths() -> None:
    exact = list(
        generate_random(RandomParams(num_prompts=10, input_len=30, output_len=4, range_ratio=1.0), 500, 1).rows
    )
    assert {r.num_input_tokens for r in exact} == {30} and {r.num_output_tokens for r in exact} == {4}
    ranged = list(
        generate_random(RandomParams(num_prompts=200, input_len=40, output_len=10, range_ratio=0.25), 500, 1).rows
    )
    assert all(10 <= r.num_input_tokens <= 40 and 2 <= r.num_output_tokens <= 10 for r in ranged)
    assert len({r.num_input_tokens for r in ranged}) > 10
    # SGLang's default range ratio 0.0 means uniform in [1, len].
    default = list(generate_random(RandomParams(num_prompts=300, input_len=8, output_len=8), 500, 2).rows)
    assert min(r.num_input_tokens for r in default) == 1 and max(r.num_input_tokens for r in default) == 8


def test_no_two_prompts_share_a_prefix() -> None:
    rows = list(generate_random(RandomParams(num_prompts=50, input_len=20, output_len=1, range_ratio=1.0), 64, 3).rows)
    for a, b in itertools.combinations(rows, 2):
        assert a.input_tokens[0] != b.input_tokens[0]
    assert all(t < 64 for r in rows for t in r.input_tokens + r.output_tokens)
    with pytest.raises(WorkloadError, match="too small"):
        generate_random(RandomParams(num_prompts=65, input_len=2), 64, 0)


def test_prefill_overhead_preset() -> None:
    p = PRESETS["prefill-overhead"]
    assert (p.num_prompts, p.input_len, p.output_len, p.range_ratio) == (50, 20480, 1, 1.0)
    assert RandomParams().range_ratio == 0.0
