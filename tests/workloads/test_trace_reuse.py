"""A later turn's input is read from the session's previous turn (workloads.trace_reuse) and reads exactly what
the full JSON path reads.

Agent traces re-send the conversation with an observation dropped from the middle, then the last answer, then
what is new; only the new part may be parsed, and any input that is not such a splice (or is not JSON) must read,
or fail, as the JSON path has it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workloads.trace
import workloads.trace_fast
import workloads.trace_reuse
from workloads.token_ids import TokenIds
from workloads.trace import TraceError, read_trace
from workloads.trace_reuse import EarlierTurns

# Every test twice: through the compiled scans and through the numpy path (tests/workloads/conftest.py).
pytestmark = pytest.mark.usefixtures("scan_path")

FIRST = '{"session_id": 0, "turn_id": 0, "input_tokens": [5], "output_tokens": []}'


def _write(path: Path, turns: list[tuple[int, str, str]]) -> None:
    """``turns``: (session, input array body, output array body), one row each, in order."""
    rows = [FIRST]
    for turn, (session, inputs, outputs) in enumerate(turns):
        rows.append(f'{{"session_id": {session}, "turn_id": {turn + 1}, "input_tokens": [{inputs}], '
                    f'"output_tokens": [{outputs}]}}')
    path.write_text("\n".join(rows) + "\n")


def _read(path: Path) -> object:
    """The rows and each row's two widths (compared apart: int32 and int64 arrays of the same ids are equal)."""
    try:
        rows = read_trace(path, 1 << 62).rows
    except TraceError as exc:
        return str(exc)
    return rows, [(r.input_tokens.typecode, r.output_tokens.typecode) for r in rows]


def _both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    got = _read(path)
    with monkeypatch.context() as m:
        m.setattr(workloads.trace, "cut_row", lambda *args: None)  # the full JSON path only
        want = _read(path)
    return got, want


def _ids(n: int, start: int) -> str:
    return ", ".join(str(start + 7 * i) for i in range(n))


@pytest.fixture
def parsed(calls_to: Callable[[ModuleType, str], list[bytes]], monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every array body parsed, in order: given to ``trace_fast.parse_ids``, or as either part of a
    ``parse_pair`` that read both (one that did not leaves them to ``parse_ids``)."""
    seen = calls_to(workloads.trace_fast, "parse_ids")
    real = workloads.trace_fast.parse_pair

    def spy(first: bytes, second: bytes, limit: int) -> object:
        got = real(first, second, limit)
        if got is not None:
            seen.extend((first, second))
        return got

    monkeypatch.setattr(workloads.trace_fast, "parse_pair", spy)
    return seen


def test_a_later_turn_parses_only_what_it_appends(tmp_path: Path, parsed: list[bytes]) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, [(0, "7, 8", "1"), (1, "9", "1"), (0, "7, 8, 10, 11", "1"), (0, "7, 8, 10, 11", "1"),
                  (1, "9, 12", "1")])
    rows = read_trace(path).rows
    assert [r.input_tokens for r in rows[1:]] == [(7, 8), (9,), (7, 8, 10, 11), (7, 8, 10, 11), (9, 12)]
    # Inputs parsed (line 1 always reads as JSON): whole first turns, then only the appended ids; an unchanged
    # input is not parsed at all.
    assert [p for p in parsed if p != b"1"] == [b"7, 8", b"9", b"10, 11", b"12"]


def test_an_agent_turn_parses_only_what_is_new(tmp_path: Path, parsed: list[bytes]) -> None:
    # SWE-agent's collapse: turn 3 drops observation 1 from the middle, then re-sends the rest, then the last
    # answer, then its own new observation. Only new observations (and every output) may be parsed.
    sys_, obs1, obs2, obs3 = _ids(40, 1000), _ids(30, 2000), _ids(30, 3000), _ids(30, 4000)
    act1, act2, act3 = _ids(5, 10_000), _ids(5, 20_000), _ids(5, 30_000)
    turns = [
        (1, f"{sys_}, {obs1}", act1),
        (2, "9, 8", "7"),  # another session between the turns: each session is remembered on its own
        (1, f"{sys_}, {obs1}, {act1}, {obs2}", act2),
        (1, f"{sys_}, {act1}, {obs2}, {act2}, {obs3}", act3),  # obs1 dropped
    ]
    path = tmp_path / "agent.jsonl"
    _write(path, turns)
    rows = read_trace(path).rows
    assert [r.input_tokens for r in rows[1:]] == [tuple(int(x) for x in t[1].split(", ")) for t in turns]
    outputs = {t[2].encode() for t in turns}
    assert [p for p in parsed if p not in outputs and p != b"5"] == [
        f"{sys_}, {obs1}".encode(), b"9, 8", obs2.encode(), obs3.encode()]


def test_an_end_re_sent_from_inside_the_shared_head_counts_its_ids_once(tmp_path: Path, parsed: list[bytes]) -> None:
    # The re-sent end (4, 5, 6) begins inside the shared head (1..5): the head's ids are counted from the end's,
    # less the overlap (4, 5), and only the new id is parsed.
    path = tmp_path / "s.jsonl"
    _write(path, [(0, "1, 2, 3, 4, 5, 6", "8"), (0, "1, 2, 3, 4, 5, 4, 5, 6, 9", "")])
    assert [r.input_tokens for r in read_trace(path).rows[1:]] == [(1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 4, 5, 6, 9)]
    assert [p for p in parsed if p not in (b"8", b"")] == [b"1, 2, 3, 4, 5, 6", b"9"]


@pytest.mark.parametrize("later", [
    "1, 2, 3, 4", "1, 2, 3, 4, 9", "1, 3, 4, 9", "3, 4, 9", "2, 3", "1, 2, 34", "1, 2, 3", "1, 2",
    "1, 2, 3, 49", "1, 2, 3, 4,", "1, 2, 3, 4, ", "1, 2, 3, , 4", "1, 2, 3,4", "1, 2, 3 , 4", "1, 3, 4, 09",
    "1, 3, 4, -9", f"1, 3, 4, {2**40}", "1, 3, 4, 0", "3, 1, 2, 3, 4", "1, 2, 3, 3", "3, 4", "1, 3, 4",
    "1, 2, 3, 4, 4, 5", "0, 2, 3, 4", "1, 2, 3, 4, 1.5", "1, 2, 3, 4, 5, ", "11, 2, 3", "1, 2, 3, 4 ",
    "1, 2, ", "1, ", "1, 5, 2, 3", "1, 9, 1, 2, 3, 4", "", " ",
])
def test_a_spliced_input_reads_what_the_json_path_reads(
        later: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, [(3, "1, 2, 3", "4"), (3, later, "5"), (3, later + ", 5, 6", "")])
    got, want = _both_ways(path, monkeypatch)
    assert got == want


def test_an_end_found_past_a_token_boundary_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "12, 5" then "12, 2, 5": the previous input's "2, 5" starts inside the id 12, not at a token.
    path = tmp_path / "b.jsonl"
    _write(path, [(1, "12, 5", ""), (1, "12, 2, 5", "")])
    got, want = _both_ways(path, monkeypatch)
    assert got == want


def test_small_ids_re_sent_from_a_wide_turn_are_held_as_the_json_path_holds_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = _ids(20, 1000)
    path = tmp_path / "q.jsonl"
    _write(path, [(1, f"{2**40}, {small}", ""), (1, small, "")])  # the wide id dropped: 4 bytes an id again
    got, want = _both_ways(path, monkeypatch)
    assert got == want  # rows and widths
    assert isinstance(got, tuple) and [codes[0] for codes in got[1]] == ["i", "q", "i"]


def test_a_wide_id_in_the_previous_turn_reads_what_the_json_path_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wide = str(2**40)
    path = tmp_path / "w.jsonl"
    _write(path, [(1, f"1, {wide}, 3", "4"), (1, "1, 3, 4, 9", "5"), (1, f"1, {wide}, 3, 4", "")])
    got, want = _both_ways(path, monkeypatch)
    assert got == want and isinstance(got, tuple)  # rows and widths


_TOKENS = st.sampled_from([0, 1, 5, 12, 123, 1234, 99999, 2**40])
_SEPS = [", ", ",", " , "]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_agent_sessions_read_what_the_json_path_reads(
        data: st.DataObject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    history: dict[int, list[int]] = {}
    last_out: dict[int, list[int]] = {}
    turns: list[tuple[int, str, str]] = []
    for _ in range(data.draw(st.integers(1, 8))):
        session = data.draw(st.integers(0, 2))
        ids = list(history.get(session, []))
        if ids and data.draw(st.booleans()):  # drop a span from the middle, or put new ids there
            lo = data.draw(st.integers(0, len(ids)))
            hi = data.draw(st.integers(lo, len(ids)))
            ids[lo:hi] = data.draw(st.lists(_TOKENS, max_size=2))
        if data.draw(st.booleans()):
            ids += last_out.get(session, [])
        ids += data.draw(st.lists(_TOKENS, max_size=4))
        if not ids:
            ids = [7]
        out = data.draw(st.lists(_TOKENS, max_size=3))
        history[session], last_out[session] = ids, out
        text = data.draw(st.sampled_from(_SEPS)).join(map(str, ids))
        edit = data.draw(st.sampled_from(["", "trailing", "leading-zero", "negative", "glued"]))
        if edit == "trailing":
            text += ", "
        elif edit == "leading-zero":
            text = text.replace(", ", ", 0", 1)
        elif edit == "negative":
            text = text.replace(", ", ", -", 1)
        elif edit == "glued":
            text = text.replace(", ", "", 1)  # two ids glued into one: a different id where a turn re-sends
        turns.append((session, text, ", ".join(map(str, out))))
    path = tmp_path / "a.jsonl"
    _write(path, turns)
    got, want = _both_ways(path, monkeypatch)
    assert got == want, turns


def test_earlier_turns_forget_everything_past_their_budget() -> None:
    earlier = EarlierTurns(budget=14)
    earlier.remember(1, b"1, 2, 3", TokenIds([1, 2, 3]), b"4", TokenIds([4]))
    earlier.remember(1, b"1, 2", TokenIds([1, 2]), b"4", TokenIds([4]))  # a session holds one turn: 5 bytes now
    assert earlier.held == 5 and set(earlier.by_session) == {1}
    earlier.remember(2, b"4, 5, 6", TokenIds([4, 5, 6]), b"7, 8", TokenIds([7, 8]))  # 16 > 14: all but the newest
    assert earlier.held == 11 and set(earlier.by_session) == {2}
    assert earlier.inputs(2, b"4, 5, 6, 7, 8, 9", 1 << 63) == (4, 5, 6, 7, 8, 9)
    assert earlier.inputs(1, b"1, 2, 9", 1 << 63) == (1, 2, 9)  # forgotten: parsed as it stands


def test_token_ids_join_matches_concatenation() -> None:
    a, b, wide = TokenIds([1, 2]), TokenIds([3]), TokenIds([2**40])
    assert TokenIds.join([a, b, a]) == (1, 2, 3, 1, 2) and TokenIds.join([a, b]).typecode == "i"
    assert TokenIds.join([a, wide]) == (1, 2, 2**40) and TokenIds.join([a, wide]).typecode == "q"
    assert TokenIds.join([]) == ()


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300_000), at=st.integers(0, 300_000), offsets=st.tuples(st.integers(0, 9), st.integers(0, 9)),
       flip=st.integers(1, 255))
def test_the_first_difference_is_found_wherever_it_lies(n: int, at: int, offsets: tuple[int, int], flip: int) -> None:
    """In the first block or a later, 4x longer one, at a bisection's edge or in its last bytes, or nowhere: the
    offset is the first one at which the two ranges differ, as a byte-by-byte scan finds it."""
    a0, b0 = offsets
    base = bytes((i * 131 + 7) % 251 for i in range(n + 10))
    a = base[:a0] + base[: n]
    other = bytearray(base[:n])
    if at < n:
        other[at] ^= flip
    b = b"\x00" * b0 + bytes(other)
    want = next((i for i in range(n) if a[a0 + i] != b[b0 + i]), n)
    assert workloads.trace_reuse._differs_at(a, a0, b, b0, n) == want
