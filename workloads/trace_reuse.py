"""What a session's next turn re-sends, read from the turn before instead of parsed again.

An agent's turn re-sends its conversation: the previous turn's input, often with a span dropped from the middle
(SWE-agent collapses the observation that leaves its window, as do Marconi's and SegLen's SWE-bench traces), then
the previous turn's output, then what is new. In the seglen SWE-bench preset 89% of all input bytes are such
repeats. So a later turn's input is matched, byte for byte, against the session's previous turn::

    input = prev_input[:start] + prev_input[q:] + ", " + prev_output + ", " + new

(``prev_input[:start]`` ends in ``", "``; any piece may be missing) and only ``new`` is parsed. Every piece is an
exact byte match at token boundaries (just after ``", "``), so the ids are exactly what parsing the whole array
gives; when a match fails the rest is parsed as it stands, and an array the fast path cannot judge still goes to
the full reader, which names the fault.

Lines lie in large buffers (the reader's chunks of the file): every comparison takes a buffer and offsets, and runs
in place (``memcmp``, ``find`` and numpy views over ranges of it), never on copies.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeGuard

from workloads import compiled_scans, trace_fast
from workloads.token_ids import TokenIds

__all__ = ["EarlierTurns"]

_SEP = b", "
# How much of the previous input's end is searched for in the next input: long enough that ids do not recur by
# chance; when that is not found, shorter, for a last message shorter than that. Only the first find is checked
# (a false one costs a parse, never an id: every piece is checked byte for byte).
_PROBES = (256, 32)
# How much of what follows the shared head is looked for in the previous input, just past the head: where the
# re-sent end begins, found by scanning only the (short) dropped span instead of the (long) re-sent end.
_HEAD_PROBE = 64
_COMMA = ord(",")
_BLOCK = 1 << 14  # the first block compared; each next one 4x longer (most heads end within tens of KB)
_SCAN = 32  # a differing block is halved down to this many bytes, then scanned byte by byte

Buffer = Any  # bytes: a line, or a chunk of the file with many lines (anything with find, slicing, buffer protocol)


class _Turn(NamedTuple):
    line: Buffer  # the buffer the row's line lies in: its input array is line[lo:hi], text between the brackets
    lo: int
    hi: int
    input_ids: TokenIds
    output_bytes: bytes
    output_ids: TokenIds


class EarlierTurns:
    """Each session's last turn (its buffer, its input's place in it, its output's bytes and both arrays' ids), so a
    later turn parses only what is new.

    Arrays are compared where they lie (``memcmp`` and ``find`` over ranges): copying each ~100 KB array out cost the
    preset's first read a tenth of its CPU time. The session only picks which turn to compare against: every piece
    reused is checked byte for byte, so a wrong pick costs a parse, never an id. Bounded: a turn holds the whole
    buffer its line lies in (a chunk of the file, workloads/trace_lines.py); past ``budget`` bytes of buffers and
    outputs held, the sessions whose last turn lies in the oldest buffers are forgotten (their next turn is parsed
    whole), until the rest fits or only the newest buffer is left."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.budget = budget
        self.held = 0
        self.by_session: dict[int | str, _Turn] = {}
        # Each buffer held, oldest first: the sessions whose last turn lies in it (by id: a chunk is no dict key).
        self.buffers: dict[int, tuple[Buffer, set[int | str]]] = {}
        # What the last ``inputs`` call spliced its ids from, ``(ids, start, stop)`` each (earlier turns' arrays and
        # what it parsed), or None when it parsed the array whole: the trace cache stores references, not copies.
        self.taken: list[tuple[TokenIds, int, int]] | None = None
        self.out_ids: TokenIds | None = None  # the output's ids, when the last ``inputs`` call parsed them too

    def inputs(self, session: object, line: Buffer, limit: int, *, lo: int = 0, hi: int | None = None,
               out: bytes = b"") -> TokenIds | None:
        """``trace_fast.parse_ids(line[lo:hi], limit)``, reusing what the session's previous turn already parsed.
        ``out``: the row's output array, parsed with what is new where it can be (``out_ids``)."""
        hi = len(line) if hi is None else hi
        self.taken = self.out_ids = None
        prior = self.by_session.get(session) if _is_key(session) else None
        if prior is None or lo == hi:
            return trace_fast.parse_ids(line[lo:hi], limit)
        size_prev = prior.hi - prior.lo
        if hi - lo == size_prev and _differs_at(prior.line, prior.lo, line, lo, size_prev) == size_prev:
            self.taken = [(prior.input_ids, 0, len(prior.input_ids))]
            return prior.input_ids
        start = _shared_start(prior, line, lo, hi)
        reused = _resent(prior, line, lo, hi, start)
        parts, rest, q = reused if reused is not None else ([], line[lo + start : hi], -1)
        pair = None
        if rest:
            pair = trace_fast.parse_pair(rest, out, limit)
            tail = trace_fast.parse_ids(rest, limit) if pair is None else pair[0]
            if tail is None:
                return None  # the full reader judges the line (and names the fault, if there is one)
            parts.append((tail, 0, len(tail)))
        elif reused is None:
            return None  # "1, 2, ": a trailing comma
        ids = prior.input_ids
        # prev is a whole array's text, never ending in ", ": the ids before start are all but those after it.
        # Those were counted for the re-sent end from q on: only the (usually short) dropped span between is.
        if start and q >= 0:
            after = len(ids) - parts[0][1] - 1 + (_commas(prior, start, q) if q >= start else -_commas(prior, q, start))
        else:
            after = _commas(prior, start, size_prev) if start else 0
        if start:
            parts.insert(0, (ids, 0, len(ids) - 1 - after))
        if any(p[0].typecode != "i" for p in parts):
            # A piece held as int64 (from a turn with an id past int32): a full parse picks int32 whenever every id
            # fits, so the whole array is parsed to pick the width as it would.
            return trace_fast.parse_ids(line[lo:hi], limit)
        self.taken = parts
        self.out_ids = pair[1] if pair is not None else None
        return TokenIds.splice(parts, lazy=True)  # copied only if needed whole: the replay packs it and keeps nothing

    def remember(self, session: object, line: Buffer, ids: TokenIds, out: bytes, out_ids: TokenIds, *,
                 lo: int = 0, hi: int | None = None) -> None:
        hi = len(line) if hi is None else hi
        if not _is_key(session) or lo == hi:
            return
        self._forget(session)
        held = self.buffers.get(id(line))
        if held is None:
            held = self.buffers[id(line)] = (line, set())
            self.held += len(line)
        held[1].add(session)
        self.held += len(out)
        self.by_session[session] = _Turn(line, lo, hi, ids, out, out_ids)
        while self.held > self.budget and len(self.buffers) > 1:
            _, (_, sessions) = next(iter(self.buffers.items()))
            for key in list(sessions):
                self._forget(key)

    def _forget(self, session: int | str) -> None:
        old = self.by_session.pop(session, None)
        if old is None:
            return
        self.held -= len(old.output_bytes)
        _, sessions = self.buffers[id(old.line)]
        sessions.discard(session)
        if not sessions:
            del self.buffers[id(old.line)]
            self.held -= len(old.line)


def _is_key(session: object) -> TypeGuard[int | str]:
    return isinstance(session, (int, str)) and not isinstance(session, bool)


def _differs_at(a: Buffer, a0: int, b: Buffer, b0: int, n: int) -> int:
    """The first offset below ``n`` at which ``a[a0:]`` and ``b[b0:]`` differ, or ``n``.

    ``memcmp`` in place (``bytes.startswith`` of a memoryview at an offset), in blocks growing 4x so that an early
    difference costs a short compare; the block that differs is halved down to a few bytes, then scanned. Twice as
    fast as comparing numpy views, which writes a bool per 8 bytes and then searches it. The compiled scan, where
    the install built it, does the same in one call."""
    if compiled_scans.scan is not None:
        return int(compiled_scans.scan.first_difference(a, a0, b, b0, n))
    view = memoryview(b)
    done, block = 0, _BLOCK
    while done < n:
        size = min(block, n - done)
        if a.startswith(view[b0 + done : b0 + done + size], a0 + done):
            done += size
            block *= 4
            continue
        lo, hi = done, done + size  # the first difference lies in [lo, hi)
        while hi - lo > _SCAN:
            mid = (lo + hi) // 2
            if a.startswith(view[b0 + lo : b0 + mid], a0 + lo):
                lo = mid
            else:
                hi = mid
        while a[a0 + lo] == b[b0 + lo]:
            lo += 1
        return lo
    return n


def _shared_start(prior: _Turn, line: Buffer, lo: int, hi: int) -> int:
    """The longest prefix the previous input and ``line[lo:hi]`` share that ends at a token boundary (just after
    ``", "``), in bytes."""
    first = _differs_at(prior.line, prior.lo, line, lo, min(prior.hi - prior.lo, hi - lo))
    # No byte differs: a token may still go on past the shorter one ("1, 2" then "1, 23"), so cut at a ", ".
    cut = prior.line.rfind(_SEP, prior.lo, prior.lo + first)
    return 0 if cut < 0 else cut - prior.lo + len(_SEP)


def _commas(prior: _Turn, at: int, until: int) -> int:
    """How many commas the previous input holds in ``[at, until)`` (numpy counts ~4x faster than ``bytes.count``, the
    compiled scan ~4x faster again)."""
    if compiled_scans.scan is not None:
        return int(compiled_scans.scan.count_byte(prior.line, prior.lo + at, prior.lo + until, _COMMA))
    np: Any = trace_fast.numpy()
    return int(np.count_nonzero(np.frombuffer(prior.line, np.uint8, until - at, prior.lo + at) == _COMMA))


def _same(a: Buffer, a0: int, b: Buffer, b0: int, n: int) -> bool:
    return _differs_at(a, a0, b, b0, n) == n


def _fits(prior: _Turn, line: Buffer, lo: int, hi: int, *, start: int, q: int) -> bool:
    """Whether ``line[lo:hi]`` goes on at ``start`` with ``prev[q:]``, ``q`` at a token boundary of ``prev``."""
    prev, p0, n = prior.line, prior.lo, prior.hi - prior.lo - q
    return (q >= 0 and start + n <= hi - lo and (q == 0 or prev[p0 + q - len(_SEP) : p0 + q] == _SEP)
            and _same(prev, p0 + q, line, lo + start, n))


def _resent_from(prior: _Turn, line: Buffer, lo: int, hi: int, start: int) -> int:
    """``q``: the previous input's end ``prev[q:]`` is what ``line[lo:hi]`` goes on with at ``start``; or -1.

    First the bytes after the head are looked for in the previous input just past the head (the dropped span is what
    lies between, usually short), then the previous input's last bytes in the line (scanning the re-sent end)."""
    prev, p0, size_prev = prior.line, prior.lo, prior.hi - prior.lo
    if size_prev <= start:
        return -1
    probe = line[lo + start : lo + start + min(_HEAD_PROBE, size_prev - start, hi - lo - start)]
    q = prev.find(probe, p0 + start, prior.hi) - p0 if probe else -1
    if q >= 0 and _fits(prior, line, lo, hi, start=start, q=q):
        return q
    for size in _PROBES:
        tail = memoryview(prev)[prior.hi - min(size, size_prev - start) : prior.hi]
        found = line.find(tail, lo + start, hi) - lo
        if found >= 0:
            q = size_prev - (found + len(tail) - start)
            return q if _fits(prior, line, lo, hi, start=start, q=q) else -1
    return -1


def _resent(prior: _Turn, line: Buffer, lo: int, hi: int,
            start: int) -> tuple[list[tuple[TokenIds, int, int]], Buffer, int] | None:
    """From ``start`` on (offsets within ``line[lo:hi]``, as every offset here): the previous input's end re-sent
    after a dropped span, then maybe the previous output, as id ranges; the bytes left to parse; and ``q``, where in
    the previous input its re-sent end begins (its ids: the first range). ``None`` when the previous input's end is
    not re-sent there, or its join to what follows is not ``", "`` and an id (the caller then parses everything from
    ``start``)."""
    size_prev = prior.hi - prior.lo
    ids, out, out_ids = prior.input_ids, prior.output_bytes, prior.output_ids
    q = _resent_from(prior, line, lo, hi, start)
    if q < 0:
        return None
    parts = [(ids, len(ids) - 1 - _commas(prior, q, size_prev) if q else 0, len(ids))]
    end, seg_len = start + size_prev - q, hi - lo
    if end == seg_len:
        return parts, b"", q
    if line[lo + end : lo + end + len(_SEP)] != _SEP or end + len(_SEP) == seg_len:
        return None  # "..., 12" went on as "123", or a trailing ", "
    at = end + len(_SEP)
    if out and at + len(out) <= seg_len and _same(out, 0, line, lo + at, len(out)):
        after = at + len(out)
        if after == seg_len:
            return [*parts, (out_ids, 0, len(out_ids))], b"", q
        if line[lo + after : lo + after + len(_SEP)] == _SEP and after + len(_SEP) < seg_len:
            return [*parts, (out_ids, 0, len(out_ids))], line[lo + after + len(_SEP) : hi], q
    return parts, line[lo + at : hi], q
