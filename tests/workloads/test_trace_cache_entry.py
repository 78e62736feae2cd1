"""The trace cache stores a re-sent input as references to the rows before (workloads.trace_cache_entry), serves
exactly the rows a parse gives from them, and takes a reference it cannot follow for a miss, never for ids."""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

import workloads.trace
import workloads.trace_cache
from workloads.trace import read_trace
from workloads.trace_cache_entry import MAGIC

HISTORY = list(range(1000, 1600))
ROWS = [
    {"session_id": 0, "turn_id": 0, "ts": 0.0, "input_tokens": HISTORY, "output_tokens": [7, 8]},
    {"session_id": 1, "turn_id": 0, "ts": 0.1, "input_tokens": [5, 2**40], "output_tokens": []},
    # The agent's next turn: a span dropped, the rest and the answer re-sent, then something new.
    {"session_id": 0, "turn_id": 1, "ts": 1.0, "input_tokens": [*HISTORY[:100], *HISTORY[300:], 7, 8, 9, 10],
     "output_tokens": [11]},
    {"session_id": 0, "turn_id": 2, "ts": 2.0, "input_tokens": [*HISTORY[:100], *HISTORY[300:], 7, 8, 9, 10],
     "output_tokens": [12]},
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", str(root))
    monkeypatch.setattr(workloads.trace, "MIN_BYTES", 0)
    monkeypatch.setattr(workloads.trace_cache, "RACY_NS", 0)
    return root


def _write(path: Path) -> Path:
    # A first line is always read as JSON: a metadata line there leaves every row to the fast path.
    path.write_text("".join(json.dumps(r) + "\n" for r in [{"__trace_metadata__": {}}, *ROWS]))
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def _plain(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setenv("HYBRIDBENCH_TRACE_CACHE", "off")
        return read_trace(path)


def _entry(cache: Path) -> tuple[Path, dict[str, Any]]:
    (entry,) = cache.glob("*.trace")
    data = entry.read_bytes()
    length = struct.unpack("<Q", data[len(MAGIC):len(MAGIC) + 8])[0]
    return entry, json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + length])


def _rewrite(entry: Path, header: dict[str, Any]) -> None:
    """The entry with ``header`` in place of its own, length and CRC made right: damage only the rules can tell."""
    data = entry.read_bytes()
    length = struct.unpack("<Q", data[len(MAGIC):len(MAGIC) + 8])[0]
    raw = json.dumps(header).encode()
    body = MAGIC + struct.pack("<Q", len(raw)) + raw + data[len(MAGIC) + 8 + length:-4]
    entry.write_bytes(body + struct.pack("<I", zlib.crc32(body)))


def test_a_re_sent_input_is_stored_as_references_and_read_back_whole(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl")
    expected = _plain(path, monkeypatch)
    assert read_trace(path) == expected
    _, header = _entry(cache)
    specs = [row[4] for row in header["rows"]]
    # Row 2: ids 0:100 and 300: of row 0's input (array 0), row 0's output (array 1), then 2 ids stored; row 3:
    # row 2's input (array 4) whole.
    assert specs == [600, 2, [[0, 0, 100], [0, 300, 600], [1, 0, 2], [-1, 2]], [[4, 0, 404]]]
    assert header["stored"] == 4 * (600 + 2 + 2 + 1 + 1) + 8 * 2  # each id stored once (row 1's are int64)
    assert header["max_id"] == 2**40
    monkeypatch.setattr(workloads.trace, "_iter_open", None)  # the parser is not called again
    again = read_trace(path)
    assert again == expected
    assert [r.input_tokens.typecode for r in again.rows] == ["i", "q", "i", "i"]


@pytest.mark.parametrize(("row", "spec"), [
    (2, [[5, 0, 100], [0, 300, 600], [1, 0, 2], [-1, 2]]),  # a later row's array
    (2, [[0, 0, 700], [0, 300, 600], [1, 0, 2], [-1, 2]]),  # past the array's end
    (2, [[0, 50, 10], [0, 300, 600], [1, 0, 2], [-1, 2]]),  # a backward range
    (2, [[2, 0, 1], [0, 300, 600], [1, 0, 2], [-1, 2]]),  # an int64 array in an int32 input
    (3, [[4, 0, 404], [-1, 1]]),  # more stored ids taken than there are
    (0, 10**9),  # more ids than the trace's bytes could hold: refused before anything is allocated
])
def test_a_reference_that_cannot_be_followed_is_a_miss(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: int, spec: Any) -> None:
    path = _write(tmp_path / "t.jsonl")
    read_trace(path)
    entry, header = _entry(cache)
    header["rows"][row][4] = spec
    _rewrite(entry, header)
    assert read_trace(path) == _plain(path, monkeypatch)
    _, again = _entry(cache)
    assert again["rows"][row][4] != spec  # the entry was dropped and written anew by the parse


def test_a_pipe_and_a_regular_file_read_the_same_lines(tmp_path: Path) -> None:
    """A regular file is read in chunks, its lines left in them (workloads.trace_lines); a pipe line by line."""
    path = _write(tmp_path / "t.jsonl")
    with path.open("a") as fh:
        fh.write("\n" + json.dumps({**ROWS[0], "turn_id": 9}))  # a blank line, then a last line with no newline
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the writer
        with fifo.open("wb") as out:
            out.write(path.read_bytes())
        os._exit(0)
    try:
        piped = read_trace(fifo)
    finally:
        os.waitpid(pid, 0)
    assert piped == read_trace(path) and len(piped.rows) == 5
