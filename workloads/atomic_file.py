"""The project's one atomic file writer: traces, plan.json, bundle.json, report.md and compare files.

Writes go to a uniquely named temporary file beside the target (two writers never share one), which
replaces the target only once it is complete: a crash, a full disk or a bad row never leaves a
half-written file, and a reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TextIO

__all__ = [
    "atomic_bytes_writer", "atomic_writer", "write_json_and_text_atomic", "write_json_atomic", "write_text_atomic",
]


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """A text handle whose content becomes ``path`` when the block ends without an exception."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    with _replacing(tmp, p), os.fdopen(fd, "w", encoding="utf-8") as fh:
        yield fh


@contextmanager
def atomic_bytes_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """``atomic_writer`` for bytes (the trace cache's entries)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    with _replacing(tmp, p), os.fdopen(fd, "wb") as fh:
        yield fh


@contextmanager
def _replacing(tmp: str, p: Path) -> Iterator[None]:
    """Move the temporary file ``tmp`` onto ``p`` once the block has written it; remove it if the block fails."""
    try:
        yield
        # mkstemp creates 0600; these are ordinary files, so honour the umask like open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    with atomic_writer(path) as fh:
        fh.write(text)


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Indented, key-sorted JSON; values JSON cannot hold (paths, enums) as their ``str``."""
    with atomic_writer(path) as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")


def write_json_and_text_atomic(json_path: Path, data: Any, text_path: Path, text: str) -> None:
    """Two files that belong together (a verdict and its report), both or neither: each is written to a temporary
    file beside its target, and neither replaces its target until both are complete. A target that is a directory
    raises IsADirectoryError before anything is written."""
    for p in (json_path, text_path):
        if p.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(p))
    with atomic_writer(json_path) as fj, atomic_writer(text_path) as ft:
        json.dump(data, fj, indent=2, sort_keys=True, default=str)
        fj.write("\n")
        ft.write(text)
