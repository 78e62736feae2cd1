"""A read trace kept on disk in binary, keyed by the file's content, so reading it again costs a copy, not a parse.

Parsing the seglen SWE-bench preset (330 MB of JSONL, 44M token ids) takes ~2.3 CPU s however fast the parser; a
study replays one trace at many capacities and policies, and each command reads it again. The first read of a file
stores its validated rows here, under the SHA-256 of its bytes (hashed as they are parsed) and a stamp of the
reader's own source, so a changed rule never serves rows an older rule accepted. JSONL stays the interchange
format: this is a cache, and deleting it loses nothing.

Finding the entry without hashing the file again: as git's index does, the file's identity (device, inode, size,
modification and change times in nanoseconds) is remembered beside the digest it had. A write changes the change
time (which no user call can set back), so the memo never outlives the content it names; it is written only for a
file unchanged while it was read and last modified more than ``RACY_NS`` before (a write within one timestamp tick
would otherwise keep the same times). Without a memo the file is parsed (and hashed as it is read) and the memo
written: hashing it first to look for an entry would cost every first read ~0.35 CPU s to spare only copies.

An entry is checked before use: its header must name the digest asked for and give every array's length, and a CRC-32
over the arrays must match what was written (a flipped bit on disk); anything else is a miss, and the file is parsed.
Entries are written atomically; past ``MAX_BYTES`` in all, the least recently used are removed.

``HYBRIDBENCH_TRACE_CACHE``: the folder (default ``~/.cache/hybridbench/traces``); ``off`` turns the cache off.
Files under ``MIN_BYTES`` parse in a fraction of a second and are not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import struct
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from workloads.token_ids import TokenIds

__all__ = ["ENV", "MAX_BYTES", "MIN_BYTES", "RACY_NS", "CachedRow", "TraceCache", "trace_cache"]

ENV = "HYBRIDBENCH_TRACE_CACHE"
MIN_BYTES = 16 << 20
MAX_BYTES = 8 << 30
RACY_NS = 2_000_000_000  # FAT and HFS+ keep times to 1-2 s; Linux filesystems to a clock tick
_MAGIC = b"hybridbench trace cache 1\n"
_LEN = struct.Struct("<Q")
_DTYPES = {"i": np.int32, "q": np.int64}
# The reader's rules live in these modules: any edit to them is a new stamp, so old entries are never served.
_READER_MODULES = ("trace.py", "trace_fast.py", "token_ids.py", "trace_cache.py")

# (session_id, turn_id, ts, input ids, output ids, extra): a row's fields, as TraceRow takes them.
CachedRow = tuple[int | str, int, float, TokenIds, TokenIds, dict[str, Any]]


def _reader_stamp() -> str | None:
    digest = hashlib.sha256(sys.byteorder.encode())  # entries hold native-order arrays
    here = Path(__file__).parent
    try:
        for name in _READER_MODULES:
            digest.update((here / name).read_bytes())
    except OSError:
        return None
    return digest.hexdigest()[:16]


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class TraceCache:
    """One cache folder; every method is best-effort (a cache that cannot be read or written is a miss)."""

    root: Path
    stamp: str

    def _entry(self, digest: str) -> Path:
        return self.root / f"{digest}-{self.stamp}.trace"

    def _memo(self, path: Path, st: os.stat_result) -> Path:
        key = json.dumps([str(path.resolve()), *_identity(st), self.stamp])
        return self.root / "by-stat" / hashlib.sha256(key.encode()).hexdigest()[:40]

    def digest_of(self, path: Path, st: os.stat_result) -> str | None:
        """The content digest remembered for this very file version, if any."""
        try:
            text = self._memo(path, st).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else None

    def keep(self, path: Path, before: os.stat_result, digest: str, metadata: dict[str, Any],
             rows: Sequence[CachedRow]) -> None:
        """Store the rows read from ``path`` (stat ``before`` the read, content ``digest``) and remember its digest.

        Nothing is kept for a file that changed while it was read (the digest may not be of the bytes it now holds);
        the memo is skipped for one modified too recently to be told apart from a later write."""
        try:
            after = path.stat()
        except OSError:
            return
        if _identity(after) != _identity(before):
            return
        self.store(digest, metadata, rows)
        if max(after.st_mtime_ns, after.st_ctime_ns) <= time.time_ns() - RACY_NS:
            with contextlib.suppress(OSError):
                _write_atomic(self._memo(path, after), digest.encode("ascii"))

    def load(self, digest: str) -> tuple[dict[str, Any], list[CachedRow], int] | None:
        """(metadata, rows, largest id) stored for the content ``digest``; None: a miss."""
        entry = self._entry(digest)
        try:
            with entry.open("rb") as fh:
                loaded = _read_entry(fh, digest)
        except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, OverflowError, MemoryError):
            return None
        if loaded is not None:
            with contextlib.suppress(OSError):
                os.utime(entry)  # recency for the pruning below
        return loaded

    def store(self, digest: str, metadata: dict[str, Any], rows: Sequence[CachedRow]) -> None:
        try:
            _write_atomic(self._entry(digest), None, lambda fh: _write_entry(fh, digest, metadata, rows))
            self._prune()
        except (OSError, ValueError, TypeError, OverflowError):
            return

    def _prune(self) -> None:
        entries = [(p.stat().st_mtime_ns, p.stat().st_size, p) for p in self.root.glob("*.trace")]
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= MAX_BYTES:
                break
            p.unlink(missing_ok=True)
            total -= size


def trace_cache() -> TraceCache | None:
    """The cache ``HYBRIDBENCH_TRACE_CACHE`` names, or None (turned off, no home, or the reader's source unreadable)."""
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    home = os.environ.get("HOME")
    root = Path(value) if value else Path(home) / ".cache" / "hybridbench" / "traces" if home else None
    stamp = _reader_stamp()
    return None if root is None or stamp is None else TraceCache(root, stamp)


def _write_atomic(path: Path, data: bytes | None, write: Callable[[BinaryIO], None] | None = None) -> None:
    """Write to a temporary file beside ``path`` and rename it into place (no reader ever sees half an entry)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with tmp.open("wb") as fh:
            if data is not None:
                fh.write(data)
            elif write is not None:
                write(fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_entry(fh: BinaryIO, digest: str, metadata: dict[str, Any], rows: Sequence[CachedRow]) -> None:
    fields = [[r[0], r[1], r[2], r[3].typecode, len(r[3]), r[4].typecode, len(r[4]), r[5]] for r in rows]
    crc, top = 0, -1
    for row in rows:
        for ids in (row[3], row[4]):
            if len(ids):
                crc = zlib.crc32(ids.view().cast("B"), crc)
                top = max(top, int(np.frombuffer(ids.view(), _DTYPES[ids.typecode]).max()))
    header = json.dumps({"digest": digest, "metadata": metadata, "rows": fields, "crc": crc,
                         "max_id": top}, allow_nan=False).encode()
    fh.write(_MAGIC + _LEN.pack(len(header)) + header)
    for row in rows:
        for ids in (row[3], row[4]):
            fh.write(ids.view())


def _read_entry(fh: io.BufferedReader, digest: str) -> tuple[dict[str, Any], list[CachedRow], int] | None:
    if fh.read(len(_MAGIC)) != _MAGIC:
        return None
    (length,) = _LEN.unpack(fh.read(_LEN.size))
    header = json.loads(fh.read(length))
    if header["digest"] != digest:  # an entry copied or renamed by hand
        return None
    rows: list[CachedRow] = []
    crc = 0
    for session, turn, ts, in_code, n_in, out_code, n_out, extra in header["rows"]:
        ids = []
        for code, n in ((in_code, n_in), (out_code, n_out)):
            if code not in ("i", "q"):
                return None
            values = array(code, [0]) * n
            view = memoryview(values).cast("B")
            fh.readinto(view)  # a short read leaves zeros: the CRC below tells
            crc = zlib.crc32(view, crc)
            ids.append(TokenIds.from_array(values))
        rows.append((session, turn, float(ts), ids[0], ids[1], extra))
    if crc != header["crc"] or not rows:
        return None
    return header["metadata"], rows, int(header["max_id"])
