"""The trace reader's fast path: a row's two token arrays cut out of the line's bytes and parsed without JSON.

A SWE-bench row is ~100 KB of token ids and a few dozen bytes of everything else. Decoding the ids through
``json`` makes a Python int per token and then checks each one in Python (12.5 CPU s and 2 GB for the seglen
preset's 44M ids). Here each array's bytes are checked with C-speed byte operations (only digits, commas and
JSON's canonical spacing; no leading zeros) and parsed straight into an int32 array by numpy (a dependency of
the package; were it missing, every line would take the full JSON path); only the small rest of the line goes
through ``json``.

The fast path accepts a strict subset of what the full reader accepts and returns ``None`` for anything else
(a sign, a float, ``true``, odd whitespace, an escaped key, an id past the limit, ...). The caller then reads
that line the full way, which names the fault in the same one-line error as ever: the rules live in one place.
"""

from __future__ import annotations

import json
from array import array
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from workloads import compiled_scans
from workloads.token_ids import INT32_LIMIT, TokenIds

if TYPE_CHECKING:
    from workloads.trace_reuse import EarlierTurns

# numpy, imported at its first use (numpy() below): its import costs more CPU than the compiled path's whole first
# read of the seglen preset. None where it is missing (the reader is still correct, several times slower per id).
_LAZY: Any = object()
np: Any = _LAZY if find_spec("numpy") is not None else None


def numpy() -> Any:
    """numpy, or None where it is missing."""
    global np  # noqa: PLW0603 - imported once, on first need
    if np is _LAZY:
        import numpy as imported  # noqa: PLC0415

        np = imported
    return np


__all__ = ["cut_row", "parse_ids"]

_INPUT = b'"input_tokens"'
_OUTPUT = b'"output_tokens"'
_ID_BYTES = b"0123456789, "
# Past 18 digits an id may overflow int64 on the way in; such a (nonsensical) row takes the full path.
_FAST_LIMIT = 10**18
_SMALL_LIMIT = 10**9
_COMMA, _SPACE, _COLON, _OPEN = ord(","), ord(" "), ord(":"), ord("[")


def _span(line: Any, key: bytes, start: int, stop: int, before: int = -1) -> tuple[int, int] | None:
    """Where the array after ``key`` (searched in ``line[start:stop]``) begins and ends, brackets excluded.

    A JSON string cannot hold ``"input_tokens"`` (its inner quotes would be escaped), so an occurrence is an
    object key; that it is the row's own and only one is checked once the rest of the line is parsed.
    ``before``: where the next key begins, if past the array; its end is then looked for back from there instead of
    through its ~100 KB (a ``]`` inside is no id: such an array fails the id check either way)."""
    k = line.find(key, start, stop)
    if k < 0:
        return None
    j = k + len(key)
    while j < stop and line[j] == _SPACE:
        j += 1
    if j >= stop or line[j] != _COLON:
        return None
    j += 1
    while j < stop and line[j] == _SPACE:
        j += 1
    if j >= stop or line[j] != _OPEN:
        return None
    end = line.rfind(b"]", j, before) if before > j else line.find(b"]", j, stop)
    return None if end < 0 else (j + 1, end)


def _digits(values: Any, high: int) -> int:
    """How many decimal digits ``values`` (all <= ``high``) take written without leading zeros (0 takes one)."""
    total, power = len(values), 10
    while power <= high:  # a vectorised count per extra digit: cheaper than a per-element search
        total += int(np.count_nonzero(values >= power))
        power *= 10
    return total


def parse_ids(seg: bytes, limit: int) -> TokenIds | None:
    """The ids of one array's bytes (brackets excluded), or ``None`` when the full reader must judge them."""
    if not seg:
        return TokenIds.from_array(array("i"))
    if compiled_scans.scan is not None:
        compiled = _compiled_ids(seg, limit)
        if compiled is not None:
            return compiled  # else an id past int32, or what only the full reader may judge: the checks below tell
    if numpy() is None:
        return None
    # The common row, checked by counting: ids in 1..10**9 - 1 whose digits, written out, are every byte that is not a
    # comma or a space. Whatever numpy skips or reads besides digits (a sign, a tab, a leading zero, the digits of a
    # wrapped 10-digit id) is a byte no id's digits account for; only an empty element adds a digit, read as an id 0.
    # So no 0 read and an equal count leave nothing but JSON's ids and spacing ("1 , 2" is JSON too), without a
    # per-byte character check in Python (bytes.translate or .count cost as much as numpy's parse; numpy's are SIMD).
    small = _small(seg, limit)
    return _int32(small) if small is not None else _ids_checked(seg, limit)


def parse_pair(first: bytes, second: bytes, limit: int) -> tuple[TokenIds, TokenIds] | None:
    """``parse_ids`` of both (a row's new input ids and its output), in one parse of ``first + ", " + second`` when
    that passes the common row's check; ``None`` when it does not (parse them one by one then).

    Half of the per-call cost of a parse is numpy's per-call overhead, and outputs are short. The joined text
    passes only if it is plain ids and spacing throughout, so each part is: the same ids, split where
    ``second``'s begin, as each part's own parse reads them."""
    if not first or not second:
        return None
    if compiled_scans.scan is not None:  # each in one pass: no joined copy, no per-call overhead to share
        pair = _compiled_ids(first, limit), _compiled_ids(second, limit)
        return None if pair[0] is None or pair[1] is None else (pair[0], pair[1])
    if numpy() is None:
        return None
    small = _small(first + b", " + second, limit)
    if small is None:
        return None
    split = len(small) - second.count(b",") - 1
    return _int32(small[:split]), _int32(small[split:])


def _compiled_ids(seg: bytes, limit: int) -> TokenIds | None:
    """The compiled parse: the plain form only (ids < int32 and ``limit``, spaces around commas), else ``None``."""
    parsed = compiled_scans.scan.parse_ids(seg, 0, len(seg), min(limit, INT32_LIMIT))
    if parsed is None:
        return None
    out = array("i")
    out.frombytes(parsed)
    return TokenIds.from_array(out)


def _small(seg: bytes, limit: int) -> Any:
    """The ids of the common row (see ``parse_ids``) as uint32, or ``None``: every other id list."""
    raw = np.frombuffer(seg, np.uint8)
    commas = int(np.count_nonzero(raw == _COMMA))
    small = _parse(seg, np.uint32, commas)
    if small is not None:
        high, digits = int(small.max()), len(seg) - commas - int(np.count_nonzero(raw == _SPACE))
        if high < min(limit, _SMALL_LIMIT) and int(small.min()) > 0 and _digits(small, high) == digits:
            return small
    return None


def _int32(small: Any) -> TokenIds:
    out = array("i")
    out.frombytes(memoryview(small.view(np.int32)).cast("B"))  # no intermediate bytes copy
    return TokenIds.from_array(out)


def _ids_checked(seg: bytes, limit: int) -> TokenIds | None:
    """Any id list the fast path above may not judge alone (an id 0, an id past 10**9): every check, spelt out."""
    if seg.translate(None, _ID_BYTES):
        return None  # a sign, a fraction, an exponent, true/false/null, a string, a nested list, a tab...
    packed = seg.replace(b" ", b"") if _SPACE in seg else seg
    if not packed or packed[:1] == b"," or packed[-1:] == b"," or b",," in packed:
        # An empty element: numpy reads "1, " as [1, 0], and a leading zero's lost digit ("01, ") would then
        # make the digit count below agree. All spaces ("[ ]", valid JSON): the full path reads it.
        return None
    top = min(limit, _FAST_LIMIT)
    raw = np.frombuffer(seg, np.uint8)
    commas, spaces = int(np.count_nonzero(raw == _COMMA)), int(np.count_nonzero(raw == _SPACE))
    digits = len(seg) - commas - spaces
    # uint32 parses fastest; below 10**9 a wrapped id (>= 2**32, so 10+ digits) cannot match the digit count.
    small = _parse(seg, np.uint32, commas)
    if small is not None:
        high = int(small.max())
        if high < min(top, _SMALL_LIMIT) and _digits(small, high) == digits:
            out = array("i")
            out.frombytes(small.view(np.int32).tobytes())
            return TokenIds.from_array(out)
    wide = _parse(seg, np.int64, commas)
    if wide is None:
        return None
    high = int(wide.max())
    if high >= top or _digits(wide, high) != digits:
        return None  # past the limit, or a leading zero ("007" is not JSON) or a digit run numpy split
    out = array("i" if high < INT32_LIMIT else "q")
    out.frombytes(wide.astype(np.int32 if high < INT32_LIMIT else np.int64).tobytes())
    return TokenIds.from_array(out)


def _parse(seg: bytes, dtype: Any, commas: int) -> Any:
    try:
        parsed = np.fromstring(seg, dtype=dtype, sep=",")  # whitespace around a comma is skipped, as in JSON
    except ValueError:  # "1 2", "1,,2": numpy >= 2 refuses what it cannot read to the end
        return None
    return parsed if len(parsed) == commas + 1 else None  # a trailing comma; older numpy stops early


def cut_row(
    line: Any, limit: int, earlier: EarlierTurns | None = None, start: int = 0, stop: int | None = None
) -> tuple[dict[str, Any], TokenIds, TokenIds] | None:
    """The row's JSON object with both token arrays emptied, and the two arrays' ids; or ``None`` (read in full).

    ``line[start:stop]`` is the row (``line``: the line, or the chunk of the file it lies in). ``earlier``: the
    reader's memory of each session's last turn (workloads/trace_reuse.py), kept up to date here."""
    if np is None:
        return None  # without numpy, int() over split bytes was slower than the full JSON path (28 vs 14 CPU s)
    stop = len(line) if stop is None else stop
    first = _span(line, _INPUT, start, stop, line.rfind(_OUTPUT, start, stop))
    if first is None:
        return None
    # Rows are written input before output: look for the second key past the first array, else from the start.
    second = _span(line, _OUTPUT, first[1], stop) or _span(line, _OUTPUT, start, stop)
    if second is None:
        return None
    (a0, a1), (b0, b1) = first, second
    if not (a1 < b0 or b1 < a0):
        return None
    lo, hi = sorted(((a0, a1), (b0, b1)))
    rest = line[start : lo[0]] + line[lo[1] : hi[0]] + line[hi[1] : stop]
    if rest.count(_INPUT) != 1 or rest.count(_OUTPUT) != 1:
        return None  # a key twice (JSON keeps the last): the full reader sees what json sees
    try:
        text = rest.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\\u" in text:
        return None  # an escaped key could be the row's real one; let the full reader decide
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("input_tokens") != [] or obj.get("output_tokens") != []:
        return None
    out = line[b0:b1]  # the input array is left where it lies: a later turn is compared with it there
    session = obj.get("session_id")
    if earlier is None:
        inputs = parse_ids(line[a0:a1], limit)
    else:
        inputs = earlier.inputs(session, line, limit, lo=a0, hi=a1, out=out)
    if inputs is None:
        return None
    outputs = earlier.out_ids if earlier is not None and earlier.out_ids is not None else parse_ids(out, limit)
    if outputs is None:
        return None
    if earlier is not None:
        earlier.remember(session, line, inputs, out, outputs, lo=a0, hi=a1)
    return obj, inputs, outputs
