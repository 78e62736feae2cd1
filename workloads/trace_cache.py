"""A read trace kept on disk in binary, keyed by the file read, so reading it again costs a copy, not a parse.

Parsing the seglen SWE-bench preset (330 MB of JSONL, 44M token ids) takes ~1 CPU s however fast the parser; a
study replays one trace at many capacities and policies, and each command reads it again. The first read of a file
stores its validated rows here, under the file's identity and a stamp of the reader that ran (its source as
imported, Python's and numpy's versions), so a changed rule never serves rows an older rule accepted. JSONL stays
the interchange format: this is a cache, and deleting it loses nothing.

The key, as git's index keys what it knows of a file: the identity of the file read (device, inode, size,
modification and change times in nanoseconds, from the open handle). A write changes the change time, which no
user call can set back, so an entry never outlives the content it was read from. An entry is written only for a
file unchanged while it was read and last modified more than ``RACY_NS`` before the read began (a write within one
timestamp tick could otherwise keep the same times). Hashing the bytes instead would cost every first read a
quarter of a CPU second (SHA-256 of 330 MB) and buy only sharing one entry between copies of a file.

An entry is checked before use: a CRC-32 over its header and arrays must match its trailer (a flipped bit on disk),
and its header must name the identity asked for; anything else is a miss, the entry is removed and the file parsed.
Every cache operation is best-effort: whatever goes wrong in it costs a parse, never a failed read. Entries are
written atomically (``workloads/atomic_file.py``); past ``MAX_BYTES`` in all the least recently used are removed.

``HYBRIDBENCH_TRACE_CACHE``: an absolute folder (default ``~/.cache/hybridbench/traces``), or ``off``. Files under
``MIN_BYTES`` parse in a fraction of a second and are not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from workloads import compiled_scans, trace_fast
from workloads.atomic_file import atomic_bytes_writer
from workloads.trace_cache_entry import CachedRow, Pieces, read_entry, write_entry

__all__ = ["ENV", "MAX_BYTES", "MIN_BYTES", "RACY_NS", "STAMP", "CachedRow", "Pieces", "TraceCache", "trace_cache"]

ENV = "HYBRIDBENCH_TRACE_CACHE"
MIN_BYTES = 16 << 20
MAX_BYTES = 8 << 30
RACY_NS = 2_000_000_000  # FAT and HFS+ keep times to 1-2 s; Linux filesystems to a clock tick
# The reader's rules live in these modules; the stamp is taken once, from the source this process imported.
_READER_MODULES = ("trace.py", "trace_lines.py", "trace_fast.py", "trace_reuse.py", "token_ids.py", "trace_cache.py",
                   "trace_cache_entry.py")



def _reader_stamp() -> str | None:
    digest = hashlib.sha256(f"{sys.byteorder} {sys.version}".encode())
    here = Path(__file__).parent
    try:
        for name in _READER_MODULES:
            digest.update((here / name).read_bytes())
        digest.update(b"numpy " + _numpy_version())
        if compiled_scans.scan is not None:  # the compiled scans read what numpy does; a rebuilt one is re-stamped
            digest.update(Path(compiled_scans.scan.__file__).read_bytes())
    except OSError:
        return None
    return digest.hexdigest()[:16]


def _numpy_version() -> bytes:
    """numpy's version.py (its version), without importing numpy: that would cost a first read more than its parse."""
    if trace_fast.np is None:
        return b"none"
    try:
        spec = find_spec("numpy")
        origin = spec.origin if spec is not None else None
        return Path(origin).with_name("version.py").read_bytes() if origin else b"unknown"
    except (ValueError, ImportError, OSError):  # an unusual layout: still a stamp, never a cache silently off
        return b"unknown"


STAMP = _reader_stamp()
# The names this cache writes (_entry, and atomic_file's ".<name>.<random>" while one is written); _MEMO: the
# by-stat/ files of the cache's earlier layout (content-keyed entries found through memos of the file's identity).
_ENTRY = re.compile(r"[0-9a-f]{64}-[0-9a-f]{16}\.trace")
_MEMO = re.compile(r"[0-9a-f]{40}")
_TEMPORARY = re.compile(rf"\.(?:{_ENTRY.pattern}|{_MEMO.pattern})\..+")


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class TraceCache:
    """One cache folder; every method is best-effort (a cache that cannot be read or written is a miss)."""

    root: Path
    stamp: str

    def _entry(self, st: os.stat_result) -> Path:
        key = hashlib.sha256(json.dumps([*_identity(st), self.stamp]).encode()).hexdigest()
        return self.root / f"{key}-{self.stamp}.trace"

    def lookup(self, st: os.stat_result) -> tuple[dict[str, Any], list[CachedRow], int] | None:
        """(metadata, rows, largest id) of the file version ``st`` (its open handle's stat); None: a miss."""
        entry = self._entry(st)
        try:
            with entry.open("rb") as fh:
                loaded = read_entry(fh, _identity(st))
            if loaded is not None:
                with contextlib.suppress(OSError):  # another user's entry in a shared folder is still good
                    os.utime(entry)  # recency, for pruning
                return loaded
        except FileNotFoundError:
            return None
        except Exception:  # best effort: damaged or unreadable, removed below
            pass
        with contextlib.suppress(OSError):
            entry.unlink(missing_ok=True)  # so the parse that follows writes it anew
        return None

    def keep(self, fh: io.BufferedReader, before: os.stat_result, *, started_ns: int, metadata: dict[str, Any],
             rows: Sequence[CachedRow], taken: Sequence[Pieces | None] | None = None) -> None:
        """Store the rows read through ``fh`` (stat ``before`` the read, which began at ``started_ns``); ``taken``:
        where each row's input ids were spliced from, if known (stored as references to the rows before).

        Nothing is kept for a file that changed while it was read, nor for one modified too recently to be told
        apart from a later write."""
        with contextlib.suppress(Exception):  # best effort, as in lookup
            after = os.fstat(fh.fileno())
            racy = max(after.st_mtime_ns, after.st_ctime_ns) > started_ns - RACY_NS
            if racy or _identity(after) != _identity(before):
                return
            self._store(after, metadata, rows, taken)
            self._prune()

    def _store(self, st: os.stat_result, metadata: dict[str, Any], rows: Sequence[CachedRow],
               taken: Sequence[Pieces | None] | None) -> None:
        if trace_fast.np is None and compiled_scans.scan is None:
            return  # the largest id is found with numpy or the compiled scans
        entry = self._entry(st)
        entry.parent.mkdir(parents=True, exist_ok=True)
        # Another process's copy, stored meanwhile, is replaced whole; so is a link planted under the entry's name.
        with atomic_bytes_writer(entry, follow=False) as out:
            write_entry(out, _identity(st), metadata, rows, taken)

    def _prune(self) -> None:
        # Only files by this cache's own names: the variable may name any folder (a home directory's dotfiles are
        # not a killed writer's temporary files, and someone's *.trace is not an entry).
        stale = time.time_ns() - 24 * 3600 * 10**9
        for tmp in [*self.root.glob(".*"), *self.root.glob("by-stat/.*")]:  # a killed writer's temporary file
            if _TEMPORARY.fullmatch(tmp.name) and tmp.stat().st_mtime_ns < stale:
                tmp.unlink(missing_ok=True)
        for memo in self.root.glob("by-stat/*"):  # the earlier layout's: no entry is found through them now
            if _MEMO.fullmatch(memo.name):
                memo.unlink(missing_ok=True)
        found = sorted((st.st_mtime_ns, st.st_size, p) for p in self.root.glob("*.trace")
                       if _ENTRY.fullmatch(p.name) and (st := p.stat()))
        while found and sum(size for _, size, _ in found) > MAX_BYTES:
            found.pop(0)[2].unlink(missing_ok=True)


def trace_cache() -> TraceCache | None:
    """The cache ``HYBRIDBENCH_TRACE_CACHE`` names, or None (turned off, no home, or the reader's source unreadable).

    Raises ValueError, naming the variable, for a value that is neither ``off`` nor an absolute folder."""
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    if value and not os.path.isabs(value):
        raise ValueError(f"{ENV}={value!r}: give an absolute folder, or off")
    home = os.environ.get("HOME")
    root = Path(value) if value else Path(home) / ".cache" / "hybridbench" / "traces" if home else None
    return None if root is None or STAMP is None else TraceCache(root, STAMP)


