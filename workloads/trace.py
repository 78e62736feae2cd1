"""The one trace format every generator writes and every consumer reads (workloads/README.md).

A trace is JSONL, one row per request, a superset of Marconi's row schema::

    {"session_id": 0, "turn_id": 0, "ts": 0.0, "num_input_tokens": 3, "num_output_tokens": 2,
     "input_tokens": [1, 2, 3], "output_tokens": [4, 5], ...optional fields}

Any Marconi or SegLen trace file therefore reads here unchanged. Optional per-row fields are kept
in ``TraceRow.extra``. A first line of the form ``{"__trace_metadata__": {...}}`` carries
trace-level metadata (generator, seed, ``synthetic``); Marconi's files have none.

This module does not generate loads or order them for serving; it only reads and writes rows.
"""

from __future__ import annotations

import io
import json
import math
import os
import select
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.atomic_file import atomic_writer
from workloads.token_ids import TokenIds, as_token_ids
from workloads.trace_cache import MIN_BYTES, Pieces, trace_cache
from workloads.trace_fast import cut_row
from workloads.trace_lines import TraceLines
from workloads.trace_reuse import EarlierTurns

__all__ = [
    "METADATA_KEY",
    "REQUIRED_KEYS",
    "TokenIds",
    "Trace",
    "TraceError",
    "TraceRow",
    "TraceStream",
    "iter_trace",
    "read_trace",
    "write_trace",
]

METADATA_KEY = "__trace_metadata__"
INT64_LIMIT = 1 << 63  # token ids travel as int64 (torch, SGLang's input_ids)
# A SWE-bench row of 128K input tokens is ~1 MB of JSON; 64 MB bounds what one line may hold in memory.
MAX_LINE_CHARS = 64 << 20
REQUIRED_KEYS = ("session_id", "turn_id", "input_tokens", "output_tokens")
_BRACE = ord("{")


class TraceError(ValueError):
    """A trace file that cannot be read; the message is one line naming file, line and problem."""


@dataclass(frozen=True, slots=True, init=False)
class TraceRow:
    """One request of a trace: the tokens it sends and the tokens it is recorded to produce.

    Token ids are held as ``TokenIds`` (4 bytes a token, compares like a tuple); any sequence of ints is taken."""

    session_id: int | str
    turn_id: int
    ts: float
    input_tokens: TokenIds
    output_tokens: TokenIds
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(  # noqa: PLR0917 - the dataclass's fields, positional as every caller passes them
            self, session_id: int | str, turn_id: int, ts: float, input_tokens: Sequence[int],
            output_tokens: Sequence[int], extra: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "turn_id", turn_id)
        object.__setattr__(self, "ts", ts)
        object.__setattr__(self, "input_tokens", as_token_ids(input_tokens))
        object.__setattr__(self, "output_tokens", as_token_ids(output_tokens))
        object.__setattr__(self, "extra", {} if extra is None else extra)

    @property
    def num_input_tokens(self) -> int:
        return len(self.input_tokens)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_tokens)

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "ts": self.ts,
            "num_input_tokens": self.num_input_tokens,
            "num_output_tokens": self.num_output_tokens,
            "input_tokens": self.input_tokens.tolist(),
            "output_tokens": self.output_tokens.tolist(),
        }
        row.update(self.extra)
        return row


@dataclass(frozen=True, slots=True)
class Trace:
    rows: tuple[TraceRow, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TraceStream:
    """A trace whose rows may be produced lazily (a generator writes it without holding every row).

    ``rows`` may be a one-shot iterator: consume it once, e.g. with ``write_trace`` or ``materialize``.
    """

    rows: Iterable[TraceRow]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def materialize(self) -> Trace:
        return Trace(tuple(self.rows), dict(self.metadata))


def _limit(vocab_size: int | None) -> int:
    return INT64_LIMIT if vocab_size is None else min(vocab_size, INT64_LIMIT)


def _token_list(value: Any, key: str, where: str, vocab_size: int | None) -> TokenIds:
    if not isinstance(value, list):
        raise TraceError(f"{where}: '{key}' must be a list of token ids, got {type(value).__name__}")
    limit = _limit(vocab_size)
    for tok in value:
        # bool is an int subclass; a True in a token list is a bug upstream, not a token.
        if not isinstance(tok, int) or isinstance(tok, bool) or tok < 0:
            raise TraceError(f"{where}: '{key}' holds {_short(tok)}, not a non-negative integer token id")
        if tok >= limit:
            what = f"the vocabulary ({vocab_size} tokens)" if limit == vocab_size else "int64"
            raise TraceError(f"{where}: '{key}' holds token id {_short(tok)}, outside {what}")
    return TokenIds(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_row(obj: Any, where: str, vocab_size: int | None = None,
               tokens: tuple[TokenIds, TokenIds] | None = None) -> TraceRow:
    """``tokens``: both lists already parsed and checked by the fast path (``obj`` then holds them empty)."""
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise TraceError(f"{where}: missing key(s) {', '.join(missing)}")
    if tokens is None:
        inputs = _token_list(obj["input_tokens"], "input_tokens", where, vocab_size)
        outputs = _token_list(obj["output_tokens"], "output_tokens", where, vocab_size)
    else:
        inputs, outputs = tokens
    if not inputs:
        raise TraceError(f"{where}: 'input_tokens' is empty (a request needs a prompt)")
    for key, toks in (("num_input_tokens", inputs), ("num_output_tokens", outputs)):
        if key in obj and obj[key] != len(toks):
            raise TraceError(f"{where}: '{key}' is {obj[key]!r} but the token list has {len(toks)}")
    session = obj["session_id"]
    if not isinstance(session, (int, str)) or isinstance(session, bool):
        raise TraceError(f"{where}: 'session_id' must be an integer or a string")
    if isinstance(session, str) and not session.isascii():
        try:  # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 file (records, exports) can hold
            session.encode("utf-8")
        except UnicodeEncodeError:
            raise TraceError(f"{where}: 'session_id' {session!r} is not text (a lone UTF-16 surrogate)") from None
    turn = obj["turn_id"]
    if not isinstance(turn, int) or isinstance(turn, bool):
        raise TraceError(f"{where}: 'turn_id' must be an integer")
    ts = obj.get("ts", 0.0)
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise TraceError(f"{where}: 'ts' must be a finite number >= 0 (seconds), got {_short(ts)}")
    known = {*REQUIRED_KEYS, "ts", "num_input_tokens", "num_output_tokens"}
    extra = {k: v for k, v in obj.items() if k not in known}
    return TraceRow(session, turn, float(ts), inputs, outputs, extra)


def iter_trace(path: str | os.PathLike[str], vocab_size: int | None = None) -> Iterator[TraceRow | dict[str, Any]]:
    """Yield the metadata dict (if the file has one) and then each row, in file order.

    Every consumer (the harness, stats, scale, the trace generator, replay, simulate) reads through here, so a
    row is refused the same way everywhere: one line naming file:line. Reads are bounded (``MAX_LINE_CHARS``:
    /dev/zero is a line that never ends); token ids must fit int64, or ``vocab_size`` when the caller knows
    the model; a (session_id, turn_id) appears once (a duplicate was sent twice)."""
    p = Path(path)
    with _open(p) as fh:
        yield from _iter_open(fh, p, vocab_size)


def _open(p: Path) -> io.BufferedReader:
    """``p`` opened for bytes (token arrays are cut out before anything is decoded). Only a regular file or a
    pipe: a directory or a device (a terminal, /dev/zero) is refused, and a pipe that no writer opens within
    ``PIPE_WAIT_S`` too (a named pipe nobody writes to held every consumer forever)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # opening a FIFO never waits
    except OSError as exc:
        raise TraceError(f"{p}: cannot open trace ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode  # the file opened, whatever the path names by now
        if stat.S_ISFIFO(mode):
            _await_writer(fd, p)
        elif not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
            raise TraceError(f"{p}: not a trace file ({kind}, not a regular file or pipe)")
        os.set_blocking(fd, True)
        return io.BufferedReader(io.FileIO(fd, "r"), buffer_size=1 << 20)
    except BaseException:
        os.close(fd)
        raise


PIPE_WAIT_S = 60.0  # how long a pipe may stay without data or a writer's hang-up before it is refused (a writer may
# be slow to start: a generator, a decompressor on a busy machine)


def _await_writer(fd: int, p: Path) -> None:
    """Return once the pipe has data or its writer hung up (EOF); refuse one that neither does in time. Linux
    reports no hang-up on a named pipe no writer has opened yet, so this waits for a writer, never past the bound."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if not poller.poll(int(PIPE_WAIT_S * 1000)):
        raise TraceError(f"{p}: a pipe with no writer (nothing written in {PIPE_WAIT_S:g} s); not a trace file")


def _iter_open(fh: io.BufferedReader, p: Path, vocab_size: int | None,
               taken: list[Pieces | None] | None = None) -> Iterator[TraceRow | dict[str, Any]]:
    """``iter_trace`` over an open file. ``taken``: where each row's input ids were spliced from is appended to it
    (``EarlierTurns.taken``), for the trace cache."""
    lines = TraceLines(fh, p, MAX_LINE_CHARS, TraceError)
    try:
        yield from _rows(lines, p, vocab_size, taken)
    except TraceError:
        lines.check()  # a file that changed meanwhile: that is the fault, not the line a truncation cut
        raise


def _rows(lines: TraceLines, p: Path, vocab_size: int | None,
          taken: list[Pieces | None] | None) -> Iterator[TraceRow | dict[str, Any]]:
    seen: dict[tuple[int | str, int], int] = {}
    limit = _limit(vocab_size)
    earlier = EarlierTurns()  # a session's next turn re-sends its history: only what is new is parsed
    for lineno, (buf, start, stop) in enumerate(lines, 1):
        if buf[start] != _BRACE and not buf[start:stop].strip():  # strip() copies the line: only when it may be blank
            continue
        where = f"{p}:{lineno}"
        fast = cut_row(buf, limit, earlier, start, stop) if lineno > 1 else None
        if fast is not None:
            row = _parse_row(fast[0], where, vocab_size, fast[1:])
            _check_once(seen, row, lineno, where)
            if taken is not None:
                taken.append(earlier.taken)
            yield row
            continue
        try:
            line = buf[start:stop].decode("utf-8")
        except UnicodeDecodeError:
            raise TraceError(f"{p}:{lineno}: not UTF-8 text") from None
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # e.g. an integer too long, nesting too deep
            raise TraceError(f"{where}: not a usable JSON row ({type(exc).__name__})") from None
        if lineno == 1 and isinstance(obj, dict) and METADATA_KEY in obj:
            meta = obj[METADATA_KEY]
            if not isinstance(meta, dict):
                raise TraceError(f"{where}: '{METADATA_KEY}' must be an object")
            yield meta
            continue
        row = _parse_row(obj, where, vocab_size)
        _check_once(seen, row, lineno, where)
        if taken is not None:
            taken.append(None)
        yield row


def _check_once(seen: dict[tuple[int | str, int], int], row: TraceRow, lineno: int, where: str) -> None:
    key = (row.session_id, row.turn_id)
    if key in seen:
        raise TraceError(f"{where}: session {_short(row.session_id)} turn {row.turn_id} already at line "
                         f"{seen[key]} (each request once)")
    seen[key] = lineno


def read_trace(path: str | os.PathLike[str], vocab_size: int | None = None) -> Trace:
    """Read a whole trace; rows keep file order (Marconi's files are already sorted by ``ts``).

    A large file read before comes from the trace cache (``workloads/trace_cache.py``): the same rows, checked
    by the same rules when they were first read, without parsing the JSON again."""
    p = Path(path)
    try:
        cache = trace_cache()
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    with _open(p) as fh:
        started = time.time_ns()  # before the stat: a write after it, in the same tick, may keep the same times
        st = os.fstat(fh.fileno())  # the file read, even if the path is re-pointed meanwhile
        if cache is None or not stat.S_ISREG(st.st_mode) or st.st_size < MIN_BYTES:  # a pipe's times may stand still
            cache = None
        hit = cache.lookup(st) if cache is not None else None
        if hit is not None and hit[2] < _limit(vocab_size):  # an id past the vocabulary: parse, and name its line
            meta, parts, _ = hit
            return Trace(tuple(TraceRow(*part) for part in parts), meta)
        rows: list[TraceRow] = []
        metadata: dict[str, Any] = {}
        taken: list[Pieces | None] | None = [] if cache is not None else None
        for item in _iter_open(fh, p, vocab_size, taken):
            if isinstance(item, TraceRow):
                rows.append(item)
            else:
                metadata = item
        if not rows:
            raise TraceError(f"{path}: the trace has no rows")
        if cache is not None:
            parts = [(r.session_id, r.turn_id, r.ts, r.input_tokens, r.output_tokens, dict(r.extra)) for r in rows]
            cache.keep(fh, st, started_ns=started, metadata=metadata, rows=parts, taken=taken)
    return Trace(tuple(rows), metadata)


def write_trace(
    path: str | os.PathLike[str], rows: Iterable[TraceRow], metadata: Mapping[str, Any] | None = None
) -> None:
    """Write atomically: a crash or a bad row never leaves a half-written trace behind."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(p) as fh:
        if metadata:
            fh.write(json.dumps({METADATA_KEY: dict(metadata)}) + "\n")
        for row in rows:
            if not (math.isfinite(row.ts) and row.ts >= 0):  # what every reader refuses is never written
                raise TraceError(f"session {row.session_id} turn {row.turn_id}: 'ts' must be a finite number >= 0 "
                                 f"(seconds), got {row.ts}")
            fh.write(json.dumps(row.to_json()) + "\n")
