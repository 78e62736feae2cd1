"""gsp: SGLang generated-shared-prefix structure, token-level."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.gsp import PRESETS, GspParams, generate_gsp
from workloads.trace import TraceRow, write_trace

V = 32000


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _rows(params: GspParams, seed: int = 0, vocab: int = V) -> list[TraceRow]:
    return list(generate_gsp(params, vocab, seed).rows)


def test_group_shares_exactly_the_system_prompt() -> None:
    params = GspParams(num_groups=5, prompts_per_group=6, system_prompt_len=40, question_len=9, output_len=3)
    rows = _rows(params)
    assert len(rows) == 30
    by_group: dict[int, list[TraceRow]] = {}
    for r in rows:
        by_group.setdefault(r.extra["group"], []).append(r)
    assert sorted(by_group) == list(range(5))
    for g, members in by_group.items():
        assert len(members) == 6
        system = members[0].input_tokens[:40]
        for a in members:
            assert a.num_input_tokens == 49 and a.num_output_tokens == 3
            assert a.input_tokens[:40] == system
            for b in members:
                if a is not b:
                    assert _lcp(a.input_tokens, b.input_tokens) == 40  # exactly the system prompt, no more
        for h, others in by_group.items():
            if h != g:
                assert _lcp(members[0].input_tokens, others[0].input_tokens) == 0
    assert all(0 <= t < V for r in rows for t in r.input_tokens + r.output_tokens)


def test_divergence_is_exact_even_with_a_tiny_vocab() -> None:
    params = GspParams(num_groups=3, prompts_per_group=8, system_prompt_len=12, question_len=6, output_len=2)
    rows = _rows(params, seed=4, vocab=8)  # random first question tokens would collide here
    for a in rows:
        for b in rows:
            if a is not b and a.extra["group"] == b.extra["group"]:
                assert _lcp(a.input_tokens, b.input_tokens) == 12


def test_lengths_stay_within_range_ratio_bounds() -> None:
    params = GspParams(
        num_groups=20, prompts_per_group=5, system_prompt_len=100, question_len=50, output_len=30, range_ratio=0.5
    )
    rows = _rows(params)
    sys_lens = {}
    for r in rows:
        members = [s for s in rows if s.extra["group"] == r.extra["group"]]
        sys_len = min(_lcp(r.input_tokens, s.input_tokens) for s in members if s is not r)
        sys_lens[r.extra["group"]] = sys_len
        q_len = r.num_input_tokens - sys_len
        assert 50 <= sys_len <= 100 and 25 <= q_len <= 50 and 15 <= r.num_output_tokens <= 30
    assert len(set(sys_lens.values())) > 1  # lengths really vary
    exact = _rows(GspParams(num_groups=3, prompts_per_group=2, system_prompt_len=7, question_len=4, output_len=2))
    assert {r.num_input_tokens for r in exact} == {11} and {r.num_output_tokens for r in exact} == {2}


def test_multi_turn_appends_output_and_next_question() -> None:
    params = GspParams(
        num_groups=2, prompts_per_group=3, system_prompt_len=10, question_len=4, output_len=5, num_turns=3
    )
    rows = _rows(params)
    assert len(rows) == 18
    by_session: dict[int | str, list[TraceRow]] = {}
    for r in rows:
        by_session.setdefault(r.session_id, []).append(r)
    for turns in by_session.values():
        assert [t.turn_id for t in turns] == [0, 1, 2]
        for prev, cur in itertools.pairwise(turns):
            assert cur.input_tokens[: len(prev.input_tokens) + 5] == prev.input_tokens + prev.output_tokens
            assert cur.num_input_tokens == prev.num_input_tokens + 5 + 4


def test_ordered_versus_shuffled() -> None:
    params = GspParams(num_groups=4, prompts_per_group=4, system_prompt_len=3, question_len=2, output_len=1)
    from dataclasses import replace

    ordered = [r.session_id for r in _rows(replace(params, ordered=True))]
    shuffled = [r.session_id for r in _rows(params)]
    assert ordered == list(range(16))
    assert sorted(shuffled) == ordered and shuffled != ordered


def test_uniform_and_zipf_group_distributions() -> None:
    uniform = _rows(GspParams(num_groups=8, prompts_per_group=50, system_prompt_len=2, question_len=2, output_len=1))
    assert set(Counter(r.extra["group"] for r in uniform).values()) == {50}
    zipf = GspParams(
        num_groups=8, prompts_per_group=50, system_prompt_len=2, question_len=2, output_len=1,
        group_distribution="zipf", zipf_alpha=1.2,
    )  # fmt: skip
    counts = Counter(r.extra["group"] for r in _rows(zipf))
    assert sum(counts.values()) == 400
    assert counts.most_common(1)[0][0] == 0 and counts[0] > 2 * counts[7]


@pytest.mark.parametrize(
    "params",
    [
        GspParams(group_distribution="zipf"),
        GspParams(zipf_alpha=1.0),
        GspParams(num_groups=0),
        GspParams(question_len=-1),
        GspParams(range_ratio=1.5),
        GspParams(num_turns=0),
    ],
)
def test_bad_parameters_raise(params: GspParams) -> None:
    with pytest.raises(WorkloadError):
        generate_gsp(params, V, 0)


def test_vocab_too_small_for_distinct_questions() -> None:
    with pytest.raises(WorkloadError, match="vocab size 4"):
        generate_gsp(GspParams(num_groups=2, prompts_per_group=5, system_prompt_len=3, question_len=2), 4, 0)


def test_presets_match_the_seed_loads() -> None:
    assert PRESETS["radix"] == GspParams(50, 10, 10240, 256, 128)
    assert PRESETS["high-token-usage"] == GspParams(8, 128, 1000, 2744, 820)
    assert PRESETS["sglang-default"] == GspParams(64, 16, 2048, 128, 256)
    assert PRESETS["sglang-default"].range_ratio == 1.0 and PRESETS["sglang-default"].num_turns == 1


def test_same_seed_same_bytes_different_seed_differs(tmp_path: Path) -> None:
    params = GspParams(num_groups=3, prompts_per_group=4, system_prompt_len=20, question_len=5, output_len=4)
    paths = []
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        stream = generate_gsp(params, V, seed)
        write_trace(tmp_path / f"{name}.jsonl", stream.rows, stream.metadata)
        paths.append(tmp_path / f"{name}.jsonl")
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b and a != c
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "b.jsonl", "c.jsonl"]


def test_a_length_past_any_context_is_a_workload_error_not_an_overflow() -> None:
    # system_prompt_len=100000000 crashed the harness in getrandbits (OverflowError, exit 3, crash.txt).
    from workloads.sampling import MAX_SEQUENCE_TOKENS

    huge = GspParams(num_groups=1, prompts_per_group=1, system_prompt_len=100_000_000, question_len=4, output_len=1)
    with pytest.raises(WorkloadError, match=f"a sequence of 99999999 tokens .*at most {MAX_SEQUENCE_TOKENS}"):
        list(generate_gsp(huge, vocab_size=4096, seed=0))
