"""Fuzzing the loaders: malformed input raises the loaders' own one-line errors, nothing else."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads.errors import WorkloadError
from workloads.sharegpt import parse_conversations
from workloads.trace import TraceError, iter_trace
from workloads.trajectories import load_trajectory, parse_trajectory

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["from", "value", "role", "content", "source", "action", "observation", "message",
                         "args", "text", "type", "history", "messages", "trajectory", "conversations",
                         "response"])  # fmt: skip
_shaped = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.sampled_from(["human", "gpt", "assistant", "user", "agent"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=25,
)
_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_settings
@given(st.one_of(_json, _shaped))
def test_sharegpt_records(record: object) -> None:
    try:
        pairs = parse_conversations(record, "f: conversation 0")
    except WorkloadError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(isinstance(u, str) and isinstance(a, str) for u, a in pairs)


@_settings
@given(st.one_of(_json, _shaped))
def test_trajectories(data: object) -> None:
    try:
        rounds = parse_trajectory(data, "t.traj")
    except WorkloadError:
        pass
    else:
        assert any(r.action for r in rounds)


@_settings
@given(st.binary(max_size=200))
def test_trajectory_files_of_arbitrary_bytes(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "x.traj"
    path.write_bytes(blob)
    with contextlib.suppress(WorkloadError):
        load_trajectory(path)


_row = st.fixed_dictionaries(
    {"session_id": st.integers(0, 3), "turn_id": st.integers(0, 3)},
    optional={
        "input_tokens": st.one_of(_json, st.lists(st.integers(-2, 10), max_size=4)),
        "output_tokens": st.one_of(_json, st.lists(st.integers(-2, 10), max_size=4)),
        "ts": _json,
        "num_input_tokens": _json,
    },
)


@_settings
@given(st.lists(st.one_of(_row.map(json.dumps), st.text(max_size=30), _json.map(json.dumps)), max_size=4),
       st.binary(max_size=20))  # fmt: skip
def test_trace_lines(tmp_path: Path, lines: list[str], tail: bytes) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n" + tail)
    try:
        for _ in iter_trace(path):
            pass
    except TraceError as exc:
        assert "\n" not in str(exc)
