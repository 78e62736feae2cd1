"""The installed servers' ``--help`` texts, kept on disk between commands.

Every plan, preview, doctor and run reads the engine's flags from its interpreter's own ``--help``: SGLang's
takes 9-12 CPU seconds (it imports the whole server), so a user who plans five commands, or a CI job that plans
every documented one, would pay it every time. A text is reused only while what that interpreter would import
is unchanged. The interpreter itself says where the package is (``importlib.util.find_spec``, run as the help
command runs: same working directory and environment, so a checkout in the working directory, ``PYTHONPATH``, a
user site-packages, an editable install's finder or a wrapper script that runs another Python are all seen as
they are), without importing it; the stamp is every file under that package (count, total size, newest mtime,
``__pycache__`` aside). Any edit, reinstall, ``git checkout`` or rebuilt extension changes it. About a tenth of a
second per probe against SGLang's ten.

``HYBRIDBENCH_HELP_CACHE``: the folder (default ``~/.cache/hybridbench/help``); ``off`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from hybridbench.config.redact import redact
from workloads.atomic_file import write_text_atomic

__all__ = ["ENV", "cache_dir", "cache_path", "install_stamp", "read_cached", "write_cached"]

ENV = "HYBRIDBENCH_HELP_CACHE"

# Run by the engine's interpreter: where ``package`` would be imported from, and a digest of its files. A top-level
# find_spec locates the package without executing its __init__.
_PROBE = """
import importlib.util, json, os, sys
spec = importlib.util.find_spec(sys.argv[1])
roots = sorted(spec.submodule_search_locations or []) if spec is not None else []
files = size = newest = 0
for root in roots:
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            st = os.stat(os.path.join(folder, name))
            files, size, newest = files + 1, size + st.st_size, max(newest, st.st_mtime_ns)
print(json.dumps([sys.executable, sys.version, roots, files, size, newest] if files else None))
"""


def cache_dir() -> Path | None:
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    if value:
        return Path(value)
    home = os.environ.get("HOME")
    return Path(home) / ".cache" / "hybridbench" / "help" if home else None


def install_stamp(python: str, package: str) -> str | None:
    """What ``python`` would import as ``package``, as a digest of its files; None when it cannot tell."""
    try:
        proc = subprocess.run([python, "-c", _PROBE, package], capture_output=True, text=True, timeout=60,
                              check=False, stdin=subprocess.DEVNULL)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    # A list, or nothing: a wrapper that answers ``-c`` with something else (a version number) is not a stamp.
    return json.dumps(found) if isinstance(found, list) else None


def cache_path(python: str, argv: list[str], package: str) -> tuple[Path, str] | None:
    """Where ``argv``'s text would be kept, and the stamp it was taken under; None: not cached."""
    folder = cache_dir()
    stamp = install_stamp(python, package) if folder is not None else None
    if folder is None or stamp is None:
        return None
    # The stamp names the folders imported from (a checkout in the cwd too). engine.extra_args ride in argv: a
    # secret's value (--api-key X) is masked, so not even its digest is on disk; the parser takes any value there.
    key = json.dumps([redact(argv), stamp])
    return folder / f"{package}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.txt", stamp


def read_cached(where: tuple[Path, str] | None) -> str | None:
    try:
        return where[0].read_text(encoding="utf-8") if where is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def write_cached(where: tuple[Path, str] | None, python: str, package: str, text: str) -> None:
    """Keep ``text`` unless the install changed while it was produced (a pip install racing the ``--help``)."""
    if where is None or install_stamp(python, package) != where[1]:
        return
    try:
        where[0].parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(where[0], text)
    except OSError:
        pass  # a read-only home: the next command asks the interpreter again
