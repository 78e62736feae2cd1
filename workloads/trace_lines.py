"""The lines of a trace, where they lie: a regular file is mapped and read in place, anything else line by line.

Reading the seglen SWE-bench preset (330 MB) line by line copied every byte twice (the kernel into the reader's
buffer, the buffer into a ``bytes`` per line) and took a sixth of its first read's CPU time. Mapped, a line is a
range of the file's pages as the page cache holds them; a later turn is compared with the session's earlier one
where both lie. Pages well behind the line read are given back (``MADV_DONTNEED``: they stay in the page cache and
come back on a later touch), so the resident set holds a window of the file, not all of it.

A mapped file truncated by another process while it is read ends the process with SIGBUS: a trace being rewritten
in place under a reader was not a trace either way (writers here replace a file whole, ``atomic_file``).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["trace_lines"]

_KEEP = 32 << 20  # bytes kept mapped behind the line read (the seglen preset's earlier turns lie <= 25 MB back)
_STEP = 8 << 20  # given back in steps of at least this much


def trace_lines(fh: io.BufferedReader, p: Path, max_chars: int,
                error: Callable[[str], Exception]) -> Iterator[tuple[Any, int, int]]:
    """``(buffer, start, stop)`` of each line in turn (its newline included); ``error(message)`` is raised for a line
    longer than ``max_chars`` or a failed read, its message naming ``p`` and the line number."""
    mapped = _map(fh)
    if mapped is None:
        yield from _read(fh, p, max_chars, error)
        return
    try:
        yield from _lines(mapped, p, max_chars, error)
    finally:
        with contextlib.suppress(BufferError):  # a view still alive somewhere: the collector unmaps it later
            mapped.close()


def _map(fh: io.BufferedReader) -> mmap.mmap | None:
    try:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # a file system that cannot map, a file emptied meanwhile: read it instead
        return None


def _lines(m: mmap.mmap, p: Path, max_chars: int, error: Callable[[str], Exception]) -> Iterator[tuple[Any, int, int]]:
    size, pos, lineno, given_back = len(m), 0, 0, 0
    dontneed = getattr(mmap, "MADV_DONTNEED", None)
    while pos < size:
        lineno += 1
        newline = m.find(b"\n", pos, pos + max_chars)
        if newline < 0 and size - pos > max_chars:
            raise error(f"{p}:{lineno}: line longer than {max_chars} characters")
        stop = size if newline < 0 else newline + 1
        yield m, pos, stop
        pos = stop
        if dontneed is not None and pos - given_back > _KEEP + _STEP:
            upto = (pos - _KEEP) // mmap.PAGESIZE * mmap.PAGESIZE
            with contextlib.suppress(OSError):
                m.madvise(dontneed, given_back, upto - given_back)
            given_back = upto


def _read(fh: io.BufferedReader, p: Path, max_chars: int,
          error: Callable[[str], Exception]) -> Iterator[tuple[Any, int, int]]:
    lineno = 0
    while True:
        lineno += 1
        try:
            raw = fh.readline(max_chars + 1)
        except OSError as exc:
            raise error(f"{p}:{lineno}: cannot read ({exc.strerror or exc})") from None
        if not raw:
            return
        if len(raw) > max_chars:
            raise error(f"{p}:{lineno}: line longer than {max_chars} characters")
        yield raw, 0, len(raw)
