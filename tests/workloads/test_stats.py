"""stats: the ideal (infinite-cache) hit rate, checked against brute force."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.gsp import GspParams, generate_gsp
from workloads.prefix_tree import PrefixTree, pack_tokens
from workloads.stats import compute_stats, format_stats, ideal_hits
from workloads.token_ids import TokenIds, largest_id
from workloads.trace import TraceRow, iter_trace, write_trace

_tokens = st.lists(st.integers(0, 2), max_size=12).map(tuple)
_rows = st.lists(st.tuples(_tokens, _tokens), min_size=1, max_size=25)


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _brute_force(rows: list[TraceRow]) -> list[int]:
    return [
        max((_lcp(r.input_tokens, e.input_tokens + e.output_tokens) for e in rows[:i]), default=0)
        for i, r in enumerate(rows)
    ]


@settings(max_examples=200, deadline=None)
@given(_rows)
def test_ideal_hits_match_brute_force(pairs: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
    rows = [TraceRow(i % 3, i, 0.0, inp, out) for i, (inp, out) in enumerate(pairs)]
    assert ideal_hits(rows) == _brute_force(rows)
    tree = PrefixTree()
    for r in rows:
        tree.insert(pack_tokens(r.input_tokens + r.output_tokens))
    prefixes = {s[:k] for r in rows for s in [r.input_tokens + r.output_tokens] for k in range(1, len(s) + 1)}
    assert tree.stored_tokens == len(prefixes)


def test_stats_of_a_gsp_trace(tmp_path: Path) -> None:
    params = GspParams(num_groups=4, prompts_per_group=5, system_prompt_len=100, question_len=20, output_len=7)
    stream = generate_gsp(params, 1000, 0)
    path = tmp_path / "gsp.jsonl"
    write_trace(path, stream.rows, stream.metadata)
    stats = compute_stats(iter_trace(path))
    assert (stats.rows, stats.sessions) == (20, 20)
    assert stats.input_tokens.total == 20 * 120 and stats.output_tokens.mean == 7.0
    assert stats.shareable_tokens == 4 * 4 * 100  # every prompt but a group's first reuses the system prompt
    assert stats.ideal_hit_rate == 1600 / 2400
    assert stats.request_hit_rate == 16 / 20
    assert stats.stored_tokens == 4 * 100 + 20 * 27
    assert stats.max_token_id < 1000
    text = format_stats(str(path), stats)
    assert "ideal hit rate 66.67%" in text and "SYNTHETIC" not in text
    items: list[TraceRow | dict[str, Any]] = [{"synthetic": True, "source": "x"}, TraceRow(0, 0, 0.0, (1,), (2,))]
    synthetic = compute_stats(items)
    assert format_stats("s", synthetic).startswith("SYNTHETIC TRACE")


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(-(2**31), 2**32 - 1), max_size=20))
def test_token_ids_pack_and_find_their_largest_as_the_struct_path_does(ids: list[int]) -> None:
    # TokenIds' int32 buffer is taken as the uint32 bytes only where they are the same: no id below 0.
    tokens = TokenIds(ids)
    try:
        want: bytes | type[Exception] = struct.pack(f"<{len(ids)}I", *ids)
    except struct.error:
        want = struct.error
    if want is struct.error:
        with pytest.raises(struct.error):
            pack_tokens(tokens)
    else:
        assert pack_tokens(tokens) == want
    if ids:
        assert largest_id(tokens) == max(ids) and largest_id(ids) == max(ids)
