"""The trace cache's entry format (workloads/trace_cache.py): a row's input ids as references to the rows before.

An agent trace's later turn re-sends its history (workloads/trace_reuse.py), so most of its ids are ids of an
earlier row. An entry stores each input as the reader spliced it, pieces each either ``[array, start, stop]`` (ids
``start:stop`` of an earlier row's input ``2 * row`` or output ``2 * row + 1``) or ``[-1, n]`` (the next ``n`` ids
stored), and stores only the ids no earlier row holds: for the seglen preset a tenth of the 178 MB written whole,
which made storing it cost more than a tenth of the first read. Layout::

    magic, header length (u64 LE), header (JSON), stored ids (each piece's, then the output's, row by row), CRC-32

The header's rows: ``[session, turn, ts, input typecode, input (n stored ids, or pieces), output typecode,
output length, extra]``. The CRC (header and ids) is checked before anything is built, and every reference must
name an earlier array of the same width and a range inside it; anything else is a miss.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from array import array
from collections.abc import Sequence
from typing import Any, BinaryIO

from workloads.token_ids import TokenIds, largest_id, largest_in

__all__ = ["CachedRow", "Pieces", "read_entry", "write_entry"]

MAGIC = b"hybridbench trace cache 4\n"
_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_WIDTHS = {"i": 4, "q": 8}

# (session_id, turn_id, ts, input ids, output ids, extra): a row's fields, as TraceRow takes them.
CachedRow = tuple[int | str, int, float, TokenIds, TokenIds, dict[str, Any]]
# Where a row's input ids were spliced from: ``ids[start:stop]`` of each ``(ids, start, stop)``, one after another
# (workloads/trace_reuse.py); None: parsed whole.
Pieces = list[tuple[TokenIds, int, int]]


def write_entry(out: BinaryIO, identity: tuple[int, ...], metadata: dict[str, Any], rows: Sequence[CachedRow],
                taken: Sequence[Pieces | None] | None = None) -> None:
    where: dict[int, int] = {}  # id() of a row's array -> its number (the rows hold them: ids stay unique)
    stored: list[tuple[TokenIds, int, int]] = []
    fields = []
    for k, (session, turn, ts, ins, outs, extra) in enumerate(rows):
        spec = _spec(ins, taken[k] if taken is not None and k < len(taken) else None, where, stored)
        stored.append((outs, 0, len(outs)))
        fields.append([session, turn, ts, ins.typecode, spec, outs.typecode, len(outs), extra])
        where.setdefault(id(ins), 2 * k)
        where.setdefault(id(outs), 2 * k + 1)
    # Written piece by piece, never joined: a 23 MB join cost the preset's first read a fifth of its storing.
    blob = [ids.view()[start:stop].cast("B") for ids, start, stop in stored]
    # Every id referenced is an id of an earlier row, itself referenced or stored: the largest is a stored one.
    if all(ids.typecode == "i" for ids, _, _ in stored):
        top = max((largest_in(piece, "i") for piece in blob if piece), default=-1)
    else:
        top = max((largest_id(ids[start:stop]) for ids, start, stop in stored if stop > start), default=-1)
    header = json.dumps({"identity": list(identity), "metadata": metadata, "rows": fields, "max_id": top,
                         "stored": sum(piece.nbytes for piece in blob)}, allow_nan=False).encode()
    head = MAGIC + _LEN.pack(len(header)) + header
    crc = zlib.crc32(head)
    for piece in blob:
        crc = zlib.crc32(piece, crc)
    out.write(head)
    out.writelines(blob)
    out.write(_CRC.pack(crc))


def _spec(ins: TokenIds, pieces: Pieces | None, where: dict[int, int],
          stored: list[tuple[TokenIds, int, int]]) -> int | list[list[int]]:
    if id(ins) in where:  # an input sent again unchanged: the earlier row's very array
        return [[where[id(ins)], 0, len(ins)]]
    if pieces is None:
        stored.append((ins, 0, len(ins)))
        return len(ins)
    total, code = 0, ins.typecode
    for ids, start, stop in pieces:  # a loop, not sum() and any() over generators: a tenth of the store's time
        total += stop - start
        if ids.typecode != code:
            total = -1
            break
    if total != len(ins):
        stored.append((ins, 0, len(ins)))
        return len(ins)
    spec = []
    for ids, start, stop in pieces:
        src = where.get(id(ids))
        if src is None:  # what the reader parsed for this row
            stored.append((ids, start, stop))
            spec.append([-1, stop - start])
        else:
            spec.append([src, start, stop])
    return spec


def read_entry(fh: io.BufferedReader, identity: tuple[int, ...]) -> tuple[dict[str, Any], list[CachedRow], int] | None:
    size = os.fstat(fh.fileno()).st_size
    magic = fh.read(len(MAGIC))
    if magic != MAGIC:
        return None
    packed = fh.read(_LEN.size)
    (length,) = _LEN.unpack(packed)
    if length > size:
        return None
    raw = fh.read(length)
    header = json.loads(raw)
    n_stored = header["stored"]
    if not isinstance(n_stored, int) or len(magic) + len(packed) + length + n_stored + _CRC.size != size:
        return None  # a damaged count: never allocate what the file does not hold
    blob = bytearray(n_stored)
    if fh.readinto(blob) != n_stored:
        return None
    crc = zlib.crc32(blob, zlib.crc32(raw, zlib.crc32(magic + packed)))
    if fh.read(_CRC.size) != _CRC.pack(crc) or header["identity"] != list(identity):
        return None
    rows = _build(header["rows"], memoryview(blob), identity[2])
    return None if rows is None else (header["metadata"], rows, int(header["max_id"]))


def _build(fields: list[Any], blob: memoryview, file_size: int) -> list[CachedRow] | None:
    """The rows, or None where a piece names no earlier array of its width or a range outside it. Bounded: a trace
    of ``file_size`` bytes holds fewer ids than that (each takes a digit and a separator)."""
    arrays: list[TokenIds] = []
    rows: list[CachedRow] = []
    at = total = 0
    for session, turn, ts, in_code, spec, out_code, n_out, extra in fields:
        ids = []
        for code, pieces in ((in_code, [[-1, spec]] if isinstance(spec, int) else spec), (out_code, [[-1, n_out]])):
            width = _WIDTHS[code]
            sizes = [p[1] if p[0] < 0 else p[2] - p[1] for p in pieces]
            total += sum(sizes)
            if total > file_size or min(sizes, default=0) < 0:
                return None
            values = array(code)
            for piece, n in zip(pieces, sizes, strict=True):
                if piece[0] < 0:
                    if at + n * width > len(blob):
                        return None
                    values.frombytes(blob[at : at + n * width])
                    at += n * width
                    continue
                src, start, stop = piece
                if not 0 <= src < len(arrays) or arrays[src].typecode != code or not 0 <= start <= stop <= len(
                        arrays[src]):
                    return None
                values.frombytes(arrays[src].view()[start:stop].cast("B"))
            ids.append(TokenIds.from_array(values))
        arrays += ids
        rows.append((session, turn, float(ts), ids[0], ids[1], extra))
    return rows if at == len(blob) else None
