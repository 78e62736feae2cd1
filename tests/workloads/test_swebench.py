"""swebench: growing agent contexts with SWE-agent observation collapsing (mid-history branch points)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.swebench import SwebenchParams, SyntheticShape, generate_swebench, kept_observations
from workloads.text_tokens import HashWordTokenizer
from workloads.trace import TraceRow, read_trace
from workloads.trajectories import parse_trajectory

FIXTURES = Path(__file__).parent / "fixtures"
V = 50000
SMALL = SyntheticShape(
    shared_prefix_len=30, task_mean=20, action_mean=8, observation_mean=15, max_segment=200, turns_mean=14
)


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _sessions(rows: list[TraceRow]) -> dict[int | str, list[TraceRow]]:
    out: dict[int | str, list[TraceRow]] = {}
    for r in rows:
        out.setdefault(r.session_id, []).append(r)
    return out


def test_kept_observations() -> None:
    assert kept_observations(3, 5) == [0, 1, 2, 3]
    assert kept_observations(5, 5) == [0, 1, 2, 3, 4, 5]
    assert kept_observations(6, 5) == [0, 2, 3, 4, 5, 6]  # round 1 collapsed: the first branch point
    assert kept_observations(9, 5) == [0, 5, 6, 7, 8, 9]


@pytest.mark.parametrize(("num_sessions", "vocab"), [(6, V), (3, 3)])  # a tiny vocab forces collisions
def test_synthetic_turns_append_then_branch_at_the_collapsed_observation(num_sessions: int, vocab: int) -> None:
    params = SwebenchParams(num_sessions=num_sessions, max_turns=20)
    rows = list(generate_swebench(params, vocab, 3, shape=SMALL).rows)
    sessions = _sessions(rows)
    assert len(sessions) == num_sessions
    checked_branches = 0
    for turns in sessions.values():
        assert [t.turn_id for t in turns] == list(range(len(turns)))
        # Recover each round's observation length from the append-only turns 1..5.
        obs = [turns[0].num_input_tokens]
        for t in range(1, min(len(turns), 6)):
            prev = turns[t - 1]
            seq = prev.input_tokens + prev.output_tokens
            assert turns[t].input_tokens[: len(seq)] == seq  # append-only before 6 rounds
            obs.append(turns[t].num_input_tokens - len(seq))
        for t in range(6, len(turns)):
            prev, cur = turns[t - 1], turns[t]
            # Turn t drops observation t-5; it shares turn t-1's sequence up to that observation.
            acts = [turns[i].num_output_tokens for i in range(t)]
            kept_before = [i for i in kept_observations(t - 1, 5) if i < t - 5]
            expected = sum(obs[i] for i in kept_before) + sum(acts[: t - 5])
            assert _lcp(cur.input_tokens, prev.input_tokens + prev.output_tokens) == expected
            assert expected < prev.num_input_tokens  # a mid-history branch, not an append
            obs.append(cur.num_input_tokens - (prev.num_input_tokens - obs[t - 5] + acts[t - 1]))
            assert obs[t] >= 1
            checked_branches += 1
    assert checked_branches > 2 * num_sessions


def test_synthetic_limits_timing_and_label() -> None:
    params = SwebenchParams(num_sessions=8, sps=2.0, art=5.0, max_turns=12, max_input=900)
    stream = generate_swebench(params, V, 11, shape=SMALL)
    rows = list(stream.rows)
    assert stream.metadata["synthetic"] is True
    assert all(r.num_input_tokens <= 900 and r.turn_id < 12 for r in rows)
    assert [r.ts for r in rows] == sorted(r.ts for r in rows)
    for sid, turns in _sessions(rows).items():
        assert turns[0].ts == pytest.approx(int(sid) / 2.0)
        gaps = [b.ts - a.ts for a, b in itertools.pairwise(turns)]
        assert all(g >= 0 and g == int(g) for g in gaps)  # Poisson think times in whole seconds
    first_turns = [turns[0] for turns in _sessions(rows).values()]
    for a in first_turns:
        for b in first_turns:
            if a is not b:
                assert _lcp(a.input_tokens, b.input_tokens) == 30  # the shared agent system prompt


def test_poisson_think_time_has_mean_art() -> None:
    params = SwebenchParams(num_sessions=40, art=7.5, max_turns=50)
    rows = list(generate_swebench(params, V, 2, shape=SMALL).rows)
    gaps = [b.ts - a.ts for turns in _sessions(rows).values() for a, b in itertools.pairwise(turns)]
    assert len(gaps) > 300 and 7.0 < sum(gaps) / len(gaps) < 8.0


def test_swe_agent_traj_file() -> None:
    path = FIXTURES / "swe_agent_tiny.traj"
    stream = generate_swebench(SwebenchParams(), V, 0, path=str(path))
    rows = list(stream.rows)
    assert stream.metadata["synthetic"] is False and stream.metadata["files"] == ["swe_agent_tiny.traj"]
    history = json.loads(path.read_text())["history"]
    tok = HashWordTokenizer(V)
    assert len(rows) == 9  # one request per assistant action
    system = tok.encode(history[0]["content"]) + tok.encode(history[1]["content"][0]["text"])
    assert rows[0].input_tokens == system and rows[0].output_tokens == tok.encode(history[2]["content"])
    assert rows[1].input_tokens == system + rows[0].output_tokens + tok.encode(history[3]["content"])
    # Turn 6 drops observation 1 (history[3]): after action 0 comes action 1 directly.
    six = rows[6].input_tokens
    assert six[: len(system) + rows[0].num_output_tokens] == system + rows[0].output_tokens
    assert six[len(system) + rows[0].num_output_tokens :][: rows[1].num_output_tokens] == rows[1].output_tokens


def test_openhands_events_and_directory_input(tmp_path: Path) -> None:
    rounds = parse_trajectory(json.loads((FIXTURES / "openhands_tiny.json").read_text()), "oh")
    assert [len(r.action) for r in rounds] == [1, 1, 1, 1]
    assert rounds[0].observation[0].startswith("Fix the failing test")
    assert json.loads(rounds[2].action[0]) == {"new_str": "fromisoformat", "path": "utils/dates.py"}
    for name in ("b.traj", "a.json"):
        (tmp_path / name).write_text((FIXTURES / "openhands_tiny.json").read_text())
    (tmp_path / "notes.txt").write_text("ignored")
    stream = generate_swebench(SwebenchParams(num_sessions=5), V, 0, path=str(tmp_path))
    assert stream.metadata["files"] == ["a.json", "b.traj"]
    assert len(list(stream.rows)) == 8


def test_marconi_named_trace_is_replayed_unchanged() -> None:
    path = FIXTURES / "swebench_sps=10_art=5_nums=2.jsonl"
    stream = generate_swebench(SwebenchParams(), V, 0, path=str(path))
    assert stream.metadata["marconi_name"] == {"dataset": "swebench", "sps": 10.0, "art": 5.0, "nums": 2}
    assert list(stream.rows) == list(read_trace(path).rows)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"info": {}}, "no 'history'"),
        ([{"role": "user", "content": "only a task"}], "no agent action"),
        ([{"source": 3}], "string 'source'"),
        ({"history": [{"role": "assistant", "content": 5}]}, "content must be text"),
        ([1, 2], "events"),
        ({"trajectory": ["step"]}, "must be an object"),
    ],
)
def test_malformed_trajectories_raise(data: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_trajectory(data, "t.traj")


def test_bad_parameters_and_paths(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="art"):
        generate_swebench(SwebenchParams(art=-1.0), V, 0)
    with pytest.raises(WorkloadError, match="no such file"):
        generate_swebench(SwebenchParams(), V, 0, path=str(tmp_path / "nope.traj"))
    with pytest.raises(WorkloadError, match=r"no \.traj"):
        generate_swebench(SwebenchParams(), V, 0, path=str(tmp_path))
    with pytest.raises(WorkloadError, match="too small"):
        generate_swebench(SwebenchParams(num_sessions=10), 5, 0, shape=SMALL)
