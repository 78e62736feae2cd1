"""The lines of a trace, where they lie: a regular file is read in large chunks and its lines left in them, a pipe
line by line.

Reading the seglen SWE-bench preset (330 MB) line by line copied every byte twice (the kernel into the reader's
buffer, the buffer into a ``bytes`` per line) and took a sixth of its first read's CPU time. Read in chunks, a line
is a range of a chunk: one copy. A later turn is compared with the session's earlier one where both lie; a chunk
lives as long as a session's last turn lies in it (``EarlierTurns`` bounds how many), so memory holds a window of
the file, not all of it. A line that goes on past its chunk is joined into a ``bytes`` of its own.

The file is read, not mapped: a mapped file truncated by another program while it was read ended the reader with
SIGBUS, no message. A file that shrinks, grows or is modified while it is read is one ``error`` naming it (its size
and modification time, before and after, and the bytes read); a replacement of the path (what the generators do,
``atomic_file``) leaves the open file as it was and its read whole.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["TraceLines"]

_CHUNK = 8 << 20  # bytes per read: large enough that the joins of lines across chunks cost nothing measurable


class TraceLines:
    """``(buffer, start, stop)`` of each line in turn (its newline included); ``error(message)`` is raised for a line
    longer than ``max_chars``, a failed read, or a regular file that changed while it was read, its message naming
    ``p`` (and the line number, for a line)."""

    def __init__(self, fh: io.BufferedReader, p: Path, max_chars: int, error: Callable[[str], Exception]) -> None:
        self.fh, self.p, self.max_chars, self.error = fh, p, max_chars, error
        st = os.fstat(fh.fileno())
        # Size and modification time, not ctime: replacing the path (an unlink of this inode) changes its ctime only.
        self.before = (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
        self.got = 0

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        if self.before is None:
            return self._by_line()
        return self._by_chunk()

    def check(self) -> None:
        """Raise ``error`` if the file changed since the read began (a fault found meanwhile may be the change's:
        a line cut where the file was truncated)."""
        if self.before is not None and self._now() != self.before:
            raise self._changed()

    def _now(self) -> tuple[int, int] | None:
        try:
            st = os.fstat(self.fh.fileno())
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def _changed(self) -> Exception:
        size = self.before[0] if self.before is not None else 0
        now = self._now()
        return self.error(f"{self.p}: the file changed while it was read ({size} bytes when the read began, "
                          f"{now[0] if now else '?'} now, {self.got} read): a trace must be replaced whole, not "
                          "rewritten in place")

    def _chunk(self, lineno: int) -> bytes:
        try:
            chunk = self.fh.read(_CHUNK)
        except OSError as exc:
            raise self.error(f"{self.p}:{lineno}: cannot read ({exc.strerror or exc})") from None
        self.got += len(chunk)
        size = self.before[0] if self.before is not None else 0
        if self.got > size or (not chunk and self.got < size):  # grown or shrunk, whatever its times say
            raise self._changed()
        return chunk

    def _by_chunk(self) -> Iterator[tuple[Any, int, int]]:
        max_chars, lineno = self.max_chars, 0
        carry: list[bytes] = []  # the pieces of a line that goes on past the chunks read so far
        carried = 0
        while chunk := self._chunk(lineno + 1):
            pos, size = 0, len(chunk)
            if carry:
                newline = chunk.find(b"\n", 0, max_chars - carried)
                if newline < 0:
                    carried += size
                    if carried > max_chars:
                        raise self.error(f"{self.p}:{lineno + 1}: line longer than {max_chars} characters")
                    carry.append(chunk)
                    continue
                carry.append(chunk[: newline + 1])
                line = b"".join(carry)
                carry, carried, pos = [], 0, newline + 1
                lineno += 1
                yield line, 0, len(line)
            while pos < size:
                newline = chunk.find(b"\n", pos, pos + max_chars)
                if newline < 0:
                    if size - pos > max_chars:
                        raise self.error(f"{self.p}:{lineno + 1}: line longer than {max_chars} characters")
                    carry, carried = [chunk[pos:]], size - pos
                    break
                lineno += 1
                yield chunk, pos, newline + 1
                pos = newline + 1
        if carry:  # the last line, with no newline
            line = b"".join(carry)
            yield line, 0, len(line)
        self.check()

    def _by_line(self) -> Iterator[tuple[Any, int, int]]:
        lineno = 0
        while True:
            lineno += 1
            try:
                raw = self.fh.readline(self.max_chars + 1)
            except OSError as exc:
                raise self.error(f"{self.p}:{lineno}: cannot read ({exc.strerror or exc})") from None
            if not raw:
                return
            if len(raw) > self.max_chars:
                raise self.error(f"{self.p}:{lineno}: line longer than {self.max_chars} characters")
            yield raw, 0, len(raw)
