"""The trace reader's fast path (workloads.trace_fast) reads exactly what the full JSON path reads.

Each line below is read twice, once as shipped and once with the fast path switched off; the rows (or the one-line
error) must be identical. Lines the fast path must take are asserted to take it, so a fast path that always
declined (and silently fell back to the 12-second reader) fails here too.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workloads.trace
import workloads.trace_fast
from workloads.token_ids import TokenIds
from workloads.trace import TraceError, TraceRow, read_trace

# Every test twice: through the compiled scans and through the numpy path (tests/workloads/conftest.py).
pytestmark = pytest.mark.usefixtures("scan_path")

HEAD = '{"session_id": 0, "turn_id": 1, "ts": 0.5, '

# (id, line, the fast path takes it)
LINES = [
    ("dumps", HEAD + '"input_tokens": [1, 22, 333, 0], "output_tokens": [4, 5]}', True),
    ("compact", HEAD.replace(" ", "") + '"input_tokens":[1,22,333,0],"output_tokens":[]}', True),
    ("output-first", HEAD + '"output_tokens": [4], "input_tokens": [7, 8]}', True),
    # The input's end is looked for back from the output key: a "]" between sends the row the full way.
    ("bracket-between", HEAD + '"input_tokens": [7, 8], "note": "]", "output_tokens": [4]}', False),
    ("list-between", HEAD + '"input_tokens": [7, 8], "note": [1], "output_tokens": [4]}', False),
    ("extra-fields", HEAD + '"input_tokens": [9], "output_tokens": [1], "note": "a,b ]", "k": [1, 2]}', True),
    ("big-id", HEAD + f'"input_tokens": [{2**40}, 9999999999, 1], "output_tokens": [1]}}', True),
    ("leading-zero", HEAD + '"input_tokens": [1, 007], "output_tokens": [1]}', False),
    ("first-leading-zero", HEAD + '"input_tokens": [01], "output_tokens": [1]}', False),
    ("zero-zero", HEAD + '"input_tokens": [1, 00], "output_tokens": [1]}', False),
    ("trailing-comma", HEAD + '"input_tokens": [1, 2,], "output_tokens": [1]}', False),
    # numpy reads a comma followed by nothing as one more 0: a leading zero's missing digit made the count agree.
    ("zero-then-trailing-comma", HEAD + '"input_tokens": [5], "output_tokens": [01, ]}', False),
    ("zeros-then-trailing-comma", HEAD + '"input_tokens": [00, ], "output_tokens": [1]}', False),
    ("mid-zero-then-trailing-comma", HEAD + '"input_tokens": [5, 01,  ], "output_tokens": [1]}', False),
    ("leading-comma-zero", HEAD + '"input_tokens": [ ,01], "output_tokens": [1]}', False),
    ("spaces-only", HEAD + '"input_tokens": [1], "output_tokens": [ ]}', False),
    ("empty-element", HEAD + '"input_tokens": [1,,2], "output_tokens": [1]}', False),
    ("missing-comma", HEAD + '"input_tokens": [1 2], "output_tokens": [1]}', False),
    ("spaced", HEAD + '"input_tokens": [ 1 ,  2 ], "output_tokens": [1]}', True),
    ("tab", HEAD + '"input_tokens": [1,\t2], "output_tokens": [1]}', False),
    ("negative", HEAD + '"input_tokens": [1, -2], "output_tokens": [1]}', False),
    ("float", HEAD + '"input_tokens": [1, 2.0], "output_tokens": [1]}', False),
    ("exponent", HEAD + '"input_tokens": [1, 2e3], "output_tokens": [1]}', False),
    ("bool", HEAD + '"input_tokens": [1, true], "output_tokens": [1]}', False),
    ("string", HEAD + '"input_tokens": [1, "2"], "output_tokens": [1]}', False),
    ("int64-edge", HEAD + f'"input_tokens": [{2**63 - 1}], "output_tokens": [1]}}', False),
    ("past-int64", HEAD + f'"input_tokens": [{2**63}], "output_tokens": [1]}}', False),
    ("wraps-uint32", HEAD + f'"input_tokens": [{2**32 + 5}], "output_tokens": [1]}}', True),
    ("duplicate-key", HEAD + '"input_tokens": [1], "output_tokens": [1], "input_tokens": [2]}', False),
    ("escaped-key", HEAD + '"input\\u005ftokens": [3], "output_tokens": [1], "x": {"input_tokens": [2]}}', False),
    ("nested-only", HEAD + '"output_tokens": [1], "x": {"input_tokens": [2]}}', False),
    ("empty-prompt", HEAD + '"input_tokens": [], "output_tokens": [1]}', True),
    ("count-mismatch", HEAD + '"num_input_tokens": 3, "input_tokens": [1, 2], "output_tokens": [1]}', True),
    ("bad-json-rest", HEAD + '"input_tokens": [1], "output_tokens": [1],}', False),
    ("not-utf8", HEAD + '"input_tokens": [1], "output_tokens": [1], "n": "\udcff"}', False),
]
FIRST = '{"session_id": 0, "turn_id": 0, "input_tokens": [5], "output_tokens": []}'


def _read(path: Path, vocab: int | None) -> object:
    """The rows, and each row's two widths (int32 arrays equal int64 ones of the same ids: the width is compared
    apart); or the one-line error."""
    try:
        rows = read_trace(path, vocab).rows
    except TraceError as exc:
        return str(exc)
    return rows, [(r.input_tokens.typecode, r.output_tokens.typecode) for r in rows]


@pytest.mark.parametrize(("line", "fast"), [(c[1], c[2]) for c in LINES], ids=[c[0] for c in LINES])
@pytest.mark.parametrize("vocab", [None, 300])
def test_fast_path_reads_what_the_json_path_reads(
        line: str, fast: bool, vocab: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes((FIRST + "\n" + line + "\n").encode("utf-8", "surrogateescape"))
    taken: list[bool] = []
    real = workloads.trace_fast.cut_row

    def spy(raw: bytes, limit: int, *rest: object) -> object:
        out = real(raw, limit, *rest)  # type: ignore[arg-type]
        taken.append(out is not None)
        return out

    monkeypatch.setattr(workloads.trace, "cut_row", spy)
    got = _read(path, vocab)
    monkeypatch.setattr(workloads.trace, "cut_row", lambda *args: None)
    want = _read(path, vocab)
    assert got == want
    if vocab is None:
        assert taken == [fast]


def test_rows_hold_compact_ids_that_behave_like_tuples() -> None:
    row = TraceRow(0, 0, 0.0, [1, 2, 3], (4,))
    assert row.input_tokens == (1, 2, 3) and row.input_tokens == [1, 2, 3] and row.input_tokens != (1, 2)
    assert row.input_tokens[1:] == (2, 3) and isinstance(row.input_tokens[1:], TokenIds)
    keyed: dict[object, str] = {(1, 2, 3): "x"}
    assert hash(row.input_tokens) == hash((1, 2, 3)) and keyed[row.input_tokens] == "x"
    assert [*row.input_tokens, *row.output_tokens] == [1, 2, 3, 4]
    assert pickle.loads(pickle.dumps(row)) == row
    assert row.input_tokens.typecode == "i" and TokenIds([2**40]).typecode == "q"
    assert sys.getsizeof(TokenIds(range(10_000))) < 100  # the array is held, not copied into the wrapper
    assert json.loads(json.dumps(row.to_json()))["input_tokens"] == [1, 2, 3]


def test_without_numpy_every_line_takes_the_json_path_and_reads_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes("\n".join([FIRST, *(line for _, line, fast in LINES if fast)]).encode() + b"\n")
    with_numpy = _read(path, None)
    monkeypatch.setattr(workloads.trace_fast, "np", None)
    assert all(workloads.trace_fast.cut_row(line.encode("utf-8", "surrogateescape"), 1 << 63) is None
               for _, line, _ in LINES)
    assert _read(path, None) == with_numpy


_PIECES = ["0", "5", "01", "00", "", " ", "123", str(2**32 + 1), str(2**40), "-1", "1.0", "1e3", "true", "+5", "\x0b5"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=st.lists(st.sampled_from(_PIECES), max_size=5), outputs=st.lists(st.sampled_from(_PIECES), max_size=3),
       sep=st.sampled_from([",", ", ", " ,", " , ", ",,"]))
def test_fast_path_agrees_with_the_json_path_on_generated_arrays(
        inputs: list[str], outputs: list[str], sep: str, tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    line = HEAD + f'"input_tokens": [{sep.join(inputs)}], "output_tokens": [{sep.join(outputs)}]}}'
    path.write_text(FIRST + "\n" + line + "\n")
    got = _read(path, None)
    real = vars(workloads.trace)["cut_row"]
    try:
        setattr(workloads.trace, "cut_row", lambda *args: None)  # noqa: B010 - the full JSON path only
        want = _read(path, None)
    finally:
        setattr(workloads.trace, "cut_row", real)  # noqa: B010
    assert got == want, line


@pytest.mark.parametrize("scan_path", ["numpy"], indirect=True)  # how numpy's one pass is kept honest
def test_zero_free_ids_take_the_one_pass_path_and_an_id_0_the_checked_one(
        calls_to: Callable[[ModuleType, str], list[bytes]]) -> None:
    # The one-pass path relies on no id reading as 0 (an empty element reads so); any 0 must reach every check.
    checked = calls_to(workloads.trace_fast, "_ids_checked")
    ids = workloads.trace_fast.parse_ids
    assert ids(b"1, 22, 333, 151935", 1 << 63) == (1, 22, 333, 151935) and checked == []
    assert ids(b"7 ,  8", 1 << 63) == (7, 8) and checked == []
    assert ids(b"1, 0, 2", 1 << 63) == (1, 0, 2) and checked == [b"1, 0, 2"]
    assert ids(b"01, ", 1 << 63) is None  # reads [1, 0] with a matching digit count: only the checks refuse it
    assert ids(b"1, 007", 1 << 63) is None and ids(str(2**32 + 5).encode(), 1 << 63) == (2**32 + 5,)
    # No per-byte character check on the one-pass path: what numpy would read besides digits must still be refused.
    for bad in (b"1, +5", b"1,\x0b5", b"1, 5\x0c", b"1,\t5", b"1, 5\x00", "1, \u0663".encode()):
        assert ids(bad, 1 << 63) is None, bad


def _session_file(path: Path, inputs: list[str], sessions: list[int]) -> None:
    rows = [FIRST]
    for turn, (text, session) in enumerate(zip(inputs, sessions, strict=True)):
        head = f'{{"session_id": {session}, "turn_id": {turn + 1}, '
        rows.append(head + f'"input_tokens": [{text}], "output_tokens": [1]}}')
    path.write_text("\n".join(rows) + "\n")


def _both_ways(path: Path) -> tuple[object, object]:
    got = _read(path, 300)
    real = vars(workloads.trace)["cut_row"]
    try:
        setattr(workloads.trace, "cut_row", lambda *args: None)  # noqa: B010 - the full JSON path only
        want = _read(path, 300)
    finally:
        setattr(workloads.trace, "cut_row", real)  # noqa: B010
    return got, want


@pytest.mark.parametrize("later", [
    "7, 8, 10", "7, 8", "7, 8,10", "7, 8, ", "7, 8, , 3", "7, 8, 03", "7, 8,  10", "7, 8 , 10", "7, 80", "7, 8, 999",
    "7, 8, -1", "7, 8, 1.5", f"7, 8, {2**40}", "7, 8, 0", "7",
])
def test_a_later_turn_reads_what_the_json_path_reads(later: str, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _session_file(path, ["7, 8", later, later + ", 5"], [3, 3, 3])
    got, want = _both_ways(path)
    assert got == want


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.integers(0, 2), st.lists(st.sampled_from(_PIECES), max_size=3),
                                st.sampled_from([", ", ",", " , "])), min_size=1, max_size=6))
def test_sessions_read_what_the_json_path_reads(turns: list[tuple[int, list[str], str]], tmp_path: Path) -> None:
    history: dict[int, str] = {}
    inputs, sessions = [], []
    for session, pieces, sep in turns:
        text = sep.join(filter(None, [history.get(session, "5"), *pieces]))
        history[session] = text
        inputs.append(text)
        sessions.append(session)
    path = tmp_path / "h.jsonl"
    _session_file(path, inputs, sessions)
    got, want = _both_ways(path)
    assert got == want


# taken: (by numpy's one joined parse, by the compiled scan). The compiled parse reads a 0 and any id below 2**31 in
# its one pass; numpy's joined parse leaves both to the checks.
@pytest.mark.parametrize(("first", "second", "taken"), [
    ("1, 22, 333", "4, 5", (True, True)), ("1 , 2 ", " 3", (True, True)), ("7", "8", (True, True)),
    ("1, ", "2", (False, False)), ("1", ", 2", (False, False)), ("1", "007", (False, False)),
    ("0", "1", (False, True)), ("1", "2000000000", (False, True)),
    ("1", "-2", (False, False)), ("1, 2", "", (False, False)), ("", "1", (False, False)),
    ("1", "2, ", (False, False)), ("1 2", "3", (False, False)),
])
@pytest.mark.parametrize("limit", [1 << 63, 300])
def test_a_pair_parsed_in_one_reads_what_each_parse_reads(
        first: str, second: str, taken: tuple[bool, bool], limit: int, scan_path: str) -> None:
    """A row's new input ids and its output are parsed together when both are plain ids, else declined."""
    a, b = first.encode(), second.encode()
    got = workloads.trace_fast.parse_pair(a, b, limit)
    plain = taken[scan_path == "compiled"]
    # an id past the limit: the checked path names it
    plain = plain and max(json.loads(f"[{first}, {second}]")) < limit
    assert (got is not None) == plain, got
    if got is not None:
        assert got == (workloads.trace_fast.parse_ids(a, limit), workloads.trace_fast.parse_ids(b, limit))
        assert [ids.typecode for ids in got] == ["i", "i"]


@settings(max_examples=400, deadline=None)
@given(first=st.text("0123456789, -\t", max_size=12), second=st.text("0123456789, -\t", max_size=8),
       limit=st.sampled_from([1 << 63, 100]))
def test_a_pair_is_read_in_one_only_as_each_parse_reads_it(first: str, second: str, limit: int) -> None:
    a, b = first.encode(), second.encode()
    got = workloads.trace_fast.parse_pair(a, b, limit)
    if got is not None:
        want = (workloads.trace_fast.parse_ids(a, limit), workloads.trace_fast.parse_ids(b, limit))
        assert got == want and [i.typecode for i in got] == [i.typecode for i in want if i is not None]
