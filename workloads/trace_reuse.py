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
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeGuard

from workloads import trace_fast
from workloads.token_ids import TokenIds

__all__ = ["EarlierTurns"]

_SEP = b", "
# How much of the previous input's end is searched for in the next input: long enough that ids do not recur by
# chance; when that is not found, shorter, for a last message shorter than that. Only the first find is checked
# (a false one costs a parse, never an id: every piece is checked byte for byte).
_PROBES = (256, 32)
_COMMA = ord(",")


class _Turn(NamedTuple):
    line: bytes  # the row's line, held whole: its input array is line[lo:hi], text between the brackets
    lo: int
    hi: int
    input_ids: TokenIds
    output_bytes: bytes
    output_ids: TokenIds


class EarlierTurns:
    """Each session's last turn (its line, its input's place in it, its output's bytes and both arrays' ids), so a
    later turn parses only what is new.

    Arrays are compared where they lie in their lines (``bytes.find``/``startswith`` over ranges, numpy views):
    copying each ~100 KB array out of its line cost the preset's first read a tenth of its CPU time. The session
    only picks which turn to compare against: every piece reused is checked byte for byte, so a wrong pick costs a
    parse, never an id. Bounded: past ``budget`` bytes of lines and outputs held (the ids cost about as much
    again), everything is forgotten."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.budget = budget
        self.held = 0
        self.by_session: dict[int | str, _Turn] = {}

    def inputs(self, session: object, line: bytes, limit: int, *, lo: int = 0,
               hi: int | None = None) -> TokenIds | None:
        """``trace_fast.parse_ids(line[lo:hi], limit)``, reusing what the session's previous turn already parsed."""
        hi = len(line) if hi is None else hi
        prior = self.by_session.get(session) if _is_key(session) else None
        if prior is None or lo == hi:
            return trace_fast.parse_ids(line[lo:hi], limit)
        prev = memoryview(prior.line)[prior.lo : prior.hi]
        ids = prior.input_ids
        if hi - lo == len(prev) and line.startswith(prev, lo):
            return ids
        start = _shared_start(prior, line, lo, hi)
        reused = _resent(prior, line, lo, hi, start)
        parts, rest, q = reused if reused is not None else ([], line[lo + start : hi], -1)
        if rest:
            tail = trace_fast.parse_ids(rest, limit)
            if tail is None:
                return None  # the full reader judges the line (and names the fault, if there is one)
            parts.append(tail)
        elif reused is None:
            return None  # "1, 2, ": a trailing comma
        # prev is a whole array's text, never ending in ", ": the ids before start are all but those after it.
        # Those were counted for the re-sent end from q on: only the (usually short) dropped span between is.
        if start and q >= 0:
            after = len(parts[0]) - 1 + (_commas(prior, start, q) if q >= start else -_commas(prior, q, start))
        else:
            after = _commas(prior, start, len(prev)) if start else 0
        parts.insert(0, ids[: len(ids) - 1 - after] if start else ids[:0])
        if any(p.typecode != "i" for p in parts):
            # A piece held as int64 (from a turn with an id past int32; its slices stay int64): a full parse picks
            # int32 whenever every id fits, so the whole array is parsed to pick the width as it would.
            return trace_fast.parse_ids(line[lo:hi], limit)
        return TokenIds.join(parts)

    def remember(self, session: object, line: bytes, ids: TokenIds, out: bytes, out_ids: TokenIds, *,
                 lo: int = 0, hi: int | None = None) -> None:
        hi = len(line) if hi is None else hi
        if not _is_key(session) or lo == hi:
            return
        old = self.by_session.pop(session, None)
        self.held += len(line) + len(out) - (len(old.line) + len(old.output_bytes) if old is not None else 0)
        if self.held > self.budget:
            self.by_session.clear()
            self.held = len(line) + len(out)
        self.by_session[session] = _Turn(line, lo, hi, ids, out, out_ids)


def _is_key(session: object) -> TypeGuard[int | str]:
    return isinstance(session, (int, str)) and not isinstance(session, bool)


def _shared_start(prior: _Turn, line: bytes, lo: int, hi: int) -> int:
    """The longest prefix the previous input and ``line[lo:hi]`` share that ends at a token boundary (just after
    ``", "``), in bytes."""
    prev, p0 = prior.line, prior.lo
    n = min(prior.hi - p0, hi - lo)
    np: Any = trace_fast.np
    words = n // 8  # compared 8 bytes at a time, then byte by byte within the first word that differs
    differs = np.frombuffer(prev, np.uint64, words, p0) != np.frombuffer(line, np.uint64, words, lo)
    word = int(differs.argmax()) if words else 0
    at = word * 8 if words and differs[word] else words * 8
    first = next((i for i in range(at, n) if prev[p0 + i] != line[lo + i]), n)
    # No byte differs: a token may still go on past the shorter one ("1, 2" then "1, 23"), so cut at a ", ".
    cut = prev.rfind(_SEP, p0, p0 + first)
    return 0 if cut < 0 else cut - p0 + len(_SEP)


def _commas(prior: _Turn, at: int, until: int) -> int:
    """How many commas the previous input holds in ``[at, until)`` (numpy counts ~4x faster than ``bytes.count``)."""
    np: Any = trace_fast.np
    return int(np.count_nonzero(np.frombuffer(prior.line, np.uint8, until - at, prior.lo + at) == _COMMA))


def _resent(prior: _Turn, line: bytes, lo: int, hi: int, start: int) -> tuple[list[TokenIds], bytes, int] | None:
    """From ``start`` on (offsets within ``line[lo:hi]``, as every offset here): the previous input's end re-sent
    after a dropped span, then maybe the previous output, as ids; the bytes left to parse; and ``q``, where in the
    previous input its re-sent end begins (its ids: the first piece). ``None`` when the
    previous input's end is not re-sent there, or its join to what follows is not ``", "`` and an id (the caller
    then parses everything from ``start``).

    The end is found by the previous input's last bytes, then checked: ``seg[start:end] == prev[q:]`` with ``q``
    at a token boundary of ``prev``."""
    prev = memoryview(prior.line)[prior.lo : prior.hi]
    ids, out, out_ids = prior.input_ids, prior.output_bytes, prior.output_ids
    size_prev = len(prev)
    for size in _PROBES:
        probe = prev[-min(size, size_prev - start):] if size_prev > start else b""
        found = line.find(probe, lo + start, hi) - lo if probe else -1
        if found >= 0:
            break
    else:
        return None
    end = found + len(probe)
    q = size_prev - (end - start)
    if q < 0 or (q > 0 and prev[q - len(_SEP) : q] != _SEP) or not line.startswith(prev[q:], lo + start):
        return None
    parts = [ids[len(ids) - 1 - _commas(prior, q, size_prev) :] if q else ids]
    seg_len = hi - lo
    if end == seg_len:
        return parts, b"", q
    if line[lo + end : lo + end + len(_SEP)] != _SEP or end + len(_SEP) == seg_len:
        return None  # "..., 12" went on as "123", or a trailing ", "
    at = end + len(_SEP)
    if out and line.startswith(out, lo + at, hi):
        after = at + len(out)
        if after == seg_len:
            return [*parts, out_ids], b"", q
        if line[lo + after : lo + after + len(_SEP)] == _SEP and after + len(_SEP) < seg_len:
            return [*parts, out_ids], line[lo + after + len(_SEP) : hi], q
    return parts, line[lo + at : hi], q
