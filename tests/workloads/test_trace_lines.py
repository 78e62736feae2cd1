"""A regular trace file is read in chunks (workloads.trace_lines), never mapped: a file truncated, rewritten or
appended to by another program while it is read is one line naming it, exit 2.

A mapped file truncated under its reader ended the process with SIGBUS (no message, no exit code of ours): the
consumer here runs in a child process so that such a death is a failed assertion, not a dead test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workloads.trace
import workloads.trace_lines
from workloads.token_ids import TokenIds
from workloads.trace import TraceError, read_trace
from workloads.trace_reuse import EarlierTurns

ROOT = Path(__file__).resolve().parents[2]

# The consumer (``workloads.stats`` through ``run_cli``, as its command line runs it), with another program's
# change to the file made once the first row is read: the reader is then in the middle of the file.
CHILD = """
import os, sys
import workloads.trace, workloads.trace_lines
from workloads import stats
from workloads.cli import run_cli
path, change, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
workloads.trace_lines._CHUNK = chunk or getattr(workloads.trace_lines, "_CHUNK", 0)
real, done = workloads.trace._parse_row, []

def changing(*args, **kwargs):
    if not done:
        done.append(1)
        size = os.path.getsize(path)
        if change == "truncate":
            os.truncate(path, size // 3)  # mid-line
        elif change == "rewrite":  # the same size, other bytes: not JSON from a third of the file on
            with open(path, "r+b") as fh:
                fh.seek(size // 3)
                fh.write(b"x" * (size - size // 3))
            os.utime(path, ns=(1, 1))  # a modification time that differs however coarse the file system's clock
        elif change == "replace":  # as the generators write: a new file renamed over the path
            with open(path + ".new", "wb") as fh:
                fh.write(b'{"session_id": 99, "turn_id": 0, "input_tokens": [1], "output_tokens": [2]}\\n')
            os.replace(path + ".new", path)
        else:
            with open(path, "ab") as fh:
                fh.write(b'{"session_id": 99, "turn_id": 0, "input_tokens": [1], "output_tokens": [2]}\\n')
    return real(*args, **kwargs)

workloads.trace._parse_row = changing
sys.exit(run_cli(stats.main, "workloads.stats", [path]))
"""


def _rows(sessions: int = 6, turns: int = 40) -> list[dict[str, object]]:
    """Agent sessions, interleaved: each turn re-sends its session's previous input and output, then new ids."""
    rows: list[dict[str, object]] = []
    history: dict[int, list[int]] = {s: [] for s in range(sessions)}
    for turn in range(turns):
        for s in range(sessions):
            history[s] = history[s] + [1000 * s + 7 * turn + k for k in range(5)]
            output = [50_000 + 100 * s + turn, 60_000 + turn]
            rows.append({"session_id": s, "turn_id": turn, "ts": float(turn), "input_tokens": history[s],
                         "output_tokens": output})
            history[s] = history[s] + output
    return rows


def _write(path: Path, rows: list[dict[str, object]], tail: str = "\n") -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + tail)
    return path


def _consume(path: Path, change: str, chunk: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(path), change, str(chunk)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HYBRIDBENCH_TRACE_CACHE": "off"},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("chunk", [0, 4096])
def test_a_file_replaced_whole_while_read_is_read_as_opened(tmp_path: Path, chunk: int) -> None:
    path = _write(tmp_path / "t.jsonl", _rows())
    proc = _consume(path, "replace", chunk)
    assert proc.returncode == 0, proc.stderr
    assert f" {len(_rows())} in 6 sessions" in proc.stdout, proc.stdout  # the file as opened, not its replacement


@pytest.mark.parametrize(("change", "chunk"), [
    ("truncate", 0),  # the whole file in the first read: the change is seen when the read ends
    ("truncate", 4096),  # a read meets the end of the file before its size: seen there
    ("rewrite", 4096),  # the rewritten bytes fail as JSON: the change, not that line, is named
    ("rewrite", 0),
    ("append", 4096),
    ("append", 0),
])
def test_a_file_changed_while_read_is_one_line_exit_2(tmp_path: Path, change: str, chunk: int) -> None:
    path = _write(tmp_path / "t.jsonl", _rows())
    size = path.stat().st_size
    proc = _consume(path, change, chunk)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # mapped, a truncation was SIGBUS: -7
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"workloads.stats: error: {path}: the file changed while it was read ({size} bytes when "
                          "the read began, "), err


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
@pytest.mark.parametrize("budget", [1, 2000, 64 << 20])
def test_lines_across_chunks_read_as_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
                                              budget: int) -> None:
    """Lines cut by the chunks' ends, earlier turns in chunks long gone by (or forgotten past the budget): the same
    rows as the file read whole, a blank line and a last line with no newline included."""
    rows = _rows()
    path = _write(tmp_path / "t.jsonl", rows, tail="")
    text = path.read_text().replace("\n", "\n\n", 1)
    path.write_text(text)
    want = read_trace(path)
    assert [r.input_tokens for r in want.rows] == [tuple(r["input_tokens"]) for r in rows]  # type: ignore[arg-type]
    monkeypatch.setattr(workloads.trace_lines, "_CHUNK", chunk)
    monkeypatch.setattr(workloads.trace, "EarlierTurns", lambda: EarlierTurns(budget))
    assert read_trace(path) == want


@pytest.mark.parametrize("chunk", [1, 300, 1200, 4096])
def test_the_line_bound_holds_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(workloads.trace_lines, "_CHUNK", chunk)
    monkeypatch.setattr(workloads.trace, "MAX_LINE_CHARS", 1000)
    row = {"session_id": 0, "turn_id": 0, "input_tokens": [1], "output_tokens": [2], "pad": ""}
    exact = json.dumps({**row, "pad": "p" * (999 - len(json.dumps(row)))})  # 999 characters and its newline
    path = _write(tmp_path / "t.jsonl", [json.loads(exact), {**row, "turn_id": 1}])
    assert len(read_trace(path).rows) == 2
    path.write_text(exact + "p\n")  # one more: 1001 with the newline
    with pytest.raises(TraceError, match=rf"^{path}:1: line longer than 1000 characters$"):
        read_trace(path)
    path.write_text(json.dumps(row) + "\n" + exact[:-1] + "pp}")  # the last line, no newline: 1001
    with pytest.raises(TraceError, match=rf"^{path}:2: line longer than 1000 characters$"):
        read_trace(path)


def test_earlier_turns_hold_a_bounded_window_of_chunks() -> None:
    """Each turn holds its whole chunk: past the budget the sessions in the oldest chunks are forgotten, so the
    chunks held (and the memory) stay bounded however long the file, and the newest turns are kept."""
    earlier = EarlierTurns(budget=3000)
    ids = TokenIds([1, 2])
    for n in range(20):
        chunk = b"1, 2" + bytes(996)  # a new 1000-byte chunk (a constant would be one object): two turns in it
        earlier.remember(2 * n, chunk, ids, b"7", ids, lo=0, hi=4)
        earlier.remember(2 * n + 1, chunk, ids, b"7", ids, lo=0, hi=4)
        assert earlier.held <= 3000 and len(earlier.buffers) <= 3
        assert earlier.held == sum(len(b) for b, _ in earlier.buffers.values()) + len(earlier.by_session)
    assert sorted(earlier.by_session) == [36, 37, 38, 39]  # the last two chunks' sessions; older ones forgotten
    assert earlier.inputs(39, b"1, 2, 3", 100) == TokenIds([1, 2, 3])  # still read from the turn before
    assert earlier.taken is not None and earlier.taken[0][0] is ids
