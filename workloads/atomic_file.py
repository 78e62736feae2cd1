"""The project's one atomic file writer: traces, plan.json, bundle.json, report.md and compare files.

Writes go to a uniquely named temporary file beside the target (two writers never share one), which
replaces the target only once it is complete: a crash, a full disk or a bad row never leaves a
half-written file, and a reader sees the old file or the new one, never a mix.

A target that is a symlink is resolved: the file it points to is written (atomically), the link stays. An existing
target that is not a regular file (a terminal, /dev/null, a FIFO, a socket) is written through, opened as it is:
a temporary file renamed over it would replace the device or pipe with a regular file. A directory is refused
(IsADirectoryError naming the path) before anything is written. ``output_problem`` says, before the work that
produces an output, why a path given for one cannot take it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TextIO

__all__ = [
    "atomic_bytes_writer", "atomic_writer", "output_problem", "write_json_and_text_atomic", "write_json_atomic",
    "write_text_atomic",
]


def _target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where the bytes go and whether they go there directly (an existing target that is not a regular file).
    A symlink is followed to the file it names; a directory raises IsADirectoryError naming ``path``."""
    p = Path(path)
    try:
        mode = p.stat().st_mode  # follows symlinks
    except FileNotFoundError:  # a new file, or a link to one not there yet: created where the link points
        return (Path(os.path.realpath(p)) if p.is_symlink() else p), False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", str(path))
    if not stat.S_ISREG(mode):
        return p, True  # opened through the path as given: /proc/self/fd/1's target is no path to rename onto
    return (Path(os.path.realpath(p)) if p.is_symlink() else p), False


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """A text handle whose content becomes ``path`` when the block ends without an exception."""
    p, direct = _target(path)
    if direct:
        with open(p, "w", encoding="utf-8") as fh:
            yield fh
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    with _replacing(tmp, p), os.fdopen(fd, "w", encoding="utf-8") as fh:
        yield fh


@contextmanager
def atomic_bytes_writer(path: str | os.PathLike[str], *, follow: bool = True) -> Iterator[BinaryIO]:
    """``atomic_writer`` for bytes (the trace cache's entries). ``follow=False``: whatever ``path`` is (a link, a
    FIFO) is replaced, never written through: a cache folder may be shared, and a link planted under an entry's
    name would otherwise have the entry written over the file it names."""
    p, direct = _target(path) if follow else (Path(path), False)
    if direct:
        with open(p, "wb") as fh:
            yield fh
        return
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
        _target(p)
    with atomic_writer(json_path) as fj, atomic_writer(text_path) as ft:
        json.dump(data, fj, indent=2, sort_keys=True, default=str)
        fj.write("\n")
        ft.write(text)


def output_problem(path: str | os.PathLike[str], *, folder: bool = False) -> str | None:
    """Why ``path`` cannot take the output file (or, with ``folder``, the output directory, parents created as
    needed) a command is about to produce, as one line naming it; None when it can. Checked before the work."""
    text = os.fspath(path)
    if not text:  # Path("") is the current directory: never write where the user did not point
        return "an empty path (it would write into the current directory); give a path"
    try:
        return _problem(Path(text), text, folder=folder)
    except OSError as exc:  # a folder on the way that cannot be searched, a symlink loop
        return f"{text}: {exc.strerror or exc}"


def _problem(p: Path, text: str, *, folder: bool) -> str | None:
    if folder:
        if p.is_symlink() and not p.exists():
            return f"{text}: a symlink to nothing"
        if p.exists() and not p.is_dir():
            return f"{text}: exists and is not a directory"
        first = next(a for a in (p.absolute(), *p.absolute().parents) if a.exists())  # the root always exists
        if not first.is_dir():
            return f"{text}: cannot create it: {first} is not a directory"
        if not os.access(first, os.W_OK | os.X_OK):
            return f"{text}: {first} is not writable"
        return None
    try:
        real, direct = _target(p)
    except IsADirectoryError:
        return f"{text}: is a directory; give a file path"
    if direct:
        return None if os.access(real, os.W_OK) else f"{text}: not writable"
    parent = real.absolute().parent
    if not parent.is_dir():
        return f"{text}: its folder {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{text}: its folder {parent} is not writable"
    return None
