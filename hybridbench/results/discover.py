"""Which directories under a results root are runs, each found once however it is reached.

The walk follows directory links only while they stay inside the root (a ``latest -> night4`` link, a loop
``a/b -> ..``, a link to /) and remembers every real path it has entered: a run reached by two paths is listed
at its first one, a loop ends, and nothing outside the root is read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MAX_DEPTH", "MAX_DIRS", "find_run_dirs", "is_run_dir"]

MAX_DEPTH = 6  # results/multirun/<date>/<time>/<job>/: a sweep's runs sit a few levels down
MAX_DIRS = 100_000  # directories entered in one walk: a store is thousands of runs, not millions


def is_run_dir(d: Path) -> bool:
    """A plan.json is there (stat only, nothing opened): a FIFO or a dangling link named plan.json makes a
    damaged run, which the reader reports in its one skipped line, not a directory silently passed over."""
    try:
        return not stat.S_ISDIR(os.lstat(d / "plan.json").st_mode)
    except OSError:
        return False


def _inside(real: Path, root: Path) -> bool:
    return real == root or root in real.parents


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Directories holding a plan.json, at most MAX_DEPTH below ``root`` (the root itself may be a run), each
    real directory once, never leaving ``root``'s real path; sorted by name at each level."""
    real_root = root.resolve()
    if is_run_dir(root):
        yield root
        return
    seen = {real_root}
    frontier = [root]
    for _ in range(MAX_DEPTH):
        nxt = []
        for d in frontier:
            try:
                children = sorted(p for p in d.iterdir() if not p.name.startswith("."))
            except OSError:
                continue
            # Plain directories before links, so a run is listed at its own path rather than a link's.
            for c in sorted(children, key=lambda p: (p.is_symlink(), p.name)):
                try:
                    if not c.is_dir():
                        continue
                    real = c.resolve(strict=True)
                except (OSError, RuntimeError):  # a dangling link, a link loop
                    continue
                if real in seen or not _inside(real, real_root) or len(seen) >= MAX_DIRS:
                    continue
                seen.add(real)
                if is_run_dir(c):
                    yield c
                else:
                    nxt.append(c)
        frontier = nxt
