"""Bounded, validated reads of run files: what every reader of a run directory (results, history, compare,
rescore, the dashboard) opens its files through.

A run directory is data someone else wrote (a pull request's CI job, a copied night, a hand-edited file), so a
read never blocks, never follows a link out of the directory it was asked about, never reads without bound and
never recurses without bound: a FIFO, a device, a link to /dev/zero or outside the root, a file larger than its
bound, JSON nested deeper than ``MAX_DEPTH`` or a timestamp that is not one is a ConfigError naming the file —
the caller's one skipped line, never a hang, a MemoryError or a RecursionError.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from hybridbench.errors import ConfigError

__all__ = [
    "MAX_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_LINES_BYTES",
    "MAX_LINE_BYTES",
    "MAX_LOG_BYTES",
    "check_depth",
    "normalise_time",
    "open_regular",
    "read_json_bounded",
    "read_lines_bounded",
]

MAX_JSON_BYTES = 64 << 20  # a bundle or plan: a GPU night's bundle is a few MB
MAX_LINE_BYTES = 64 << 20  # one JSONL line, the trace reader's bound
MAX_LINES_BYTES = 8 << 30  # a whole records file (a long GPU sweep writes a few GB at most)
MAX_LOG_BYTES = 1 << 30  # a server log, read whole for its batch lines (a GPU night's is tens of MB)
MAX_DEPTH = 64  # JSON nesting: hybridbench writes at most ~8 levels; deeper is damage or an attack


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def open_regular(path: Path, root: Path | None = None, *, limit: int = MAX_JSON_BYTES) -> IO[bytes]:
    """``path`` opened for binary reading when it is a regular file of at most ``limit`` bytes whose real path
    stays inside ``root`` (default: the file's own directory); else a ConfigError naming the file."""
    base = (root if root is not None else path.parent).resolve()
    real = path.resolve()
    if not _inside(real, base):
        raise ConfigError(f"{path}: a link leading out of {base} (to {real}); not read")
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer; the fstat below refuses it anyway.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file (a FIFO, device or directory); not read")
        if st.st_size > limit:
            raise ConfigError(f"{path}: {st.st_size} bytes, over the {limit}-byte bound for this file; not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """A ConfigError when ``value`` nests lists/objects deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ConfigError(f"{where}: JSON nested deeper than {limit} levels; not read")
        stack.extend((c, depth + 1) for c in children)


def _loads(text: str, where: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        # json's message can end in "at" ("Unterminated string starting at"): the position completes it
        raise ConfigError(f"{where}: not JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno} column "
                          f"{exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels; not read") from None
    check_depth(value, where)
    return value


def read_json_bounded(path: Path, root: Path | None = None, *, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in ``path``, read through ``open_regular`` and bounded in size and depth."""
    with open_regular(path, root, limit=limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew between fstat and read
        raise ConfigError(f"{path}: over the {limit}-byte bound for this file; not read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return _loads(text, str(path))


def read_lines_bounded(path: Path, what: str, root: Path | None = None) -> Iterator[tuple[str, Any]]:
    """(``file:line``, value) for each non-blank JSONL line; each line at most ``MAX_LINE_BYTES``."""
    with open_regular(path, root, limit=MAX_LINES_BYTES) as fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            lineno += 1
            where = f"{path}:{lineno}"
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise ConfigError(f"{where}: a line over {MAX_LINE_BYTES} bytes; not read")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"{path}: not UTF-8 text") from None
            if line.strip():
                try:
                    yield where, _loads(line, where)
                except ConfigError as exc:
                    raise ConfigError(str(exc).replace(f"{where}: not JSON", f"{where}: not {what}")) from None


def normalise_time(value: str, where: str) -> str:
    """An ISO 8601 time as UTC ISO text (``2026-01-02T03:04:05+00:00``); a time without a zone is read as UTC
    (what hybridbench has always written is UTC). "" stays "" (a bundle written before ``created`` existed)."""
    if not value:
        return ""
    try:
        text = value.strip()
        stamp = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise ConfigError(f"{where}: created {value[:40]!r} is not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    if not 1970 <= stamp.year <= 2261:  # pandas' nanosecond timestamps end in 2262
        raise ConfigError(f"{where}: created {value[:40]!r} is out of range")
    return stamp.astimezone(timezone.utc).isoformat()
