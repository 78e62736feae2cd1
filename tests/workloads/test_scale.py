"""scale: lengths and counts shrink by a factor; the sharing structure survives."""

from __future__ import annotations

import itertools

import pytest

from workloads.errors import WorkloadError
from workloads.gsp import GspParams, generate_gsp
from workloads.scale import scale_sequence, scale_stream
from workloads.stats import compute_stats
from workloads.swebench import SwebenchParams, SyntheticShape, generate_swebench
from workloads.trace import TraceRow

V = 32000


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_scaled_gsp_keeps_whole_groups_and_exact_shared_prefix() -> None:
    params = GspParams(num_groups=10, prompts_per_group=6, system_prompt_len=800, question_len=64, output_len=24)
    stream = scale_stream(generate_gsp(params, V, 0), 8, V)
    rows = list(stream.rows)
    assert stream.metadata["scale"] == [
        {"factor": 8, "lengths": True, "counts": True, "count_unit": "gsp group, else session"}
    ]
    groups: dict[int, list[TraceRow]] = {}
    for r in rows:
        groups.setdefault(r.extra["group"], []).append(r)
    assert len(groups) == 2 and all(len(m) == 6 for m in groups.values())  # ceil(10 / 8) whole groups
    for members in groups.values():
        for a, b in itertools.combinations(members, 2):
            assert _lcp(a.input_tokens, b.input_tokens) == 100  # 800 / 8: shares exactly the system prompt
    assert all(r.num_input_tokens == 108 and r.num_output_tokens == 3 for r in rows)
    assert all(0 <= t < V for r in rows for t in r.input_tokens + r.output_tokens)


def test_lengths_only_keeps_counts_and_hit_rate() -> None:
    shape = SyntheticShape(shared_prefix_len=64, task_mean=40, action_mean=24, observation_mean=48, turns_mean=12)
    params = SwebenchParams(num_sessions=6)
    original = list(generate_swebench(params, V, 1, shape=shape).rows)
    scaled = list(scale_stream(generate_swebench(params, V, 1, shape=shape), 4, V, counts=False).rows)
    assert len(scaled) == len(original)
    for o, s in zip(original, scaled, strict=True):
        assert s.num_input_tokens == -(-o.num_input_tokens // 4) and s.num_output_tokens >= 1
    # Turn t+1 shares turn t's input + output, in whole blocks.
    for a, b in itertools.pairwise(original):
        if a.session_id == b.session_id:
            i, j = original.index(a), original.index(b)
            shared = _lcp(b.input_tokens, a.input_tokens + a.output_tokens)
            scaled_shared = _lcp(scaled[j].input_tokens, scaled[i].input_tokens + scaled[i].output_tokens)
            assert scaled_shared == shared // 4
    before = compute_stats(iter(original)).ideal_hit_rate
    after = compute_stats(iter(scaled)).ideal_hit_rate
    assert abs(before - after) < 0.05


def test_counts_only_and_sequence_edge_cases() -> None:
    rows = [TraceRow(s, t, 0.0, (s, t, 1), (2,)) for s in range(7) for t in range(2)]
    from workloads.trace import TraceStream

    kept = list(scale_stream(TraceStream(rows), 3, V, lengths=False).rows)
    assert [(r.session_id, r.turn_id) for r in kept] == [(0, 0), (0, 1), (3, 0), (3, 1), (6, 0), (6, 1)]
    assert kept[0] is rows[0]
    inp, out = scale_sequence((5, 6, 7), 2, 10, V)
    assert len(inp) == 1 and len(out) == 1  # a non-empty output stays non-empty
    assert scale_sequence((), 0, 4, V) == ((), ())
    # Each scaled token hashes the whole prefix: equal blocks after different prefixes differ.
    a, _ = scale_sequence((1, 2, 3, 4, 5, 6), 6, 2, V)
    b, _ = scale_sequence((9, 2, 3, 4, 5, 6), 6, 2, V)
    c, _ = scale_sequence((1, 2, 3, 4, 0, 6), 6, 2, V)
    assert all(x != y for x, y in zip(a, b, strict=True)) and a[:2] == c[:2] and a[2] != c[2]
    with pytest.raises(WorkloadError):
        scale_stream(TraceStream(rows), 0, V)
