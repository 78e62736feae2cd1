"""The schema versions this hybridbench reads, per file, and the one-line refusal of a newer one.

Every file the project has written so far is version 1 (plan.json, bundle.json, each records.jsonl line);
their shapes only grew (keys added, never renamed), so the reader fills what an older file lacks. A file
written by a newer hybridbench is refused (exit 2) rather than half-understood.
"""

from __future__ import annotations

from pathlib import Path

from hybridbench.errors import ConfigError
from hybridbench.plan.types import PLAN_SCHEMA_VERSION
from hybridbench.records.schema import RECORD_SCHEMA_VERSION
from hybridbench.results.bundle import BUNDLE_SCHEMA_VERSION

__all__ = ["READABLE", "check_version"]

# file kind -> the versions this reader understands (oldest first)
READABLE: dict[str, tuple[int, ...]] = {
    "plan": tuple(range(1, PLAN_SCHEMA_VERSION + 1)),
    "bundle": tuple(range(1, BUNDLE_SCHEMA_VERSION + 1)),
    "record": tuple(range(1, RECORD_SCHEMA_VERSION + 1)),
}


def check_version(where: Path | str, kind: str, found: object) -> int:
    """``found`` (the file's ``schema_version``; absent counts as 1) if readable, else a ConfigError naming it."""
    if found is None:
        return 1
    known = READABLE[kind]
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise ConfigError(f"{where}: schema_version {found!r} is not a {kind} schema version")
    if found > known[-1]:
        raise ConfigError(f"{where}: {kind} schema version {found} is newer than this hybridbench reads "
                          f"(up to {known[-1]}); read it with a newer hybridbench")
    return found
