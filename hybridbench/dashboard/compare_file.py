"""compare.json files under a results root, read through the bounded reader and checked for the shape the
dashboard draws: a damaged or hand-made one (a list, ``deltas`` a string, a pair that is not two names) is that
file's one skipped line, never a crash of the whole site."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError
from hybridbench.results.safe_io import read_json_bounded

__all__ = ["MAX_COMPARES", "read_compare"]

MAX_COMPARES = 10_000


def _problem(data: Any) -> str:
    if not isinstance(data, dict):
        return f"not a compare.json (a JSON {type(data).__name__}, not an object)"
    if not isinstance(data.get("verdict"), str):
        return "not a compare.json (no verdict string)"
    deltas = data.get("deltas", [])
    if not isinstance(deltas, list) or not all(isinstance(d, dict) for d in deltas):
        return "not a compare.json (deltas must be a list of objects)"
    pairs = data.get("pairs", [])
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                              for p in pairs):
        return "not a compare.json (pairs must be a list of [workload, arm])"
    return ""


def read_compare(root: Path) -> Iterator[tuple[Path, dict[str, Any] | None, str]]:
    """(path, the comparison or None, why not) for each compare/compare.json under ``root``, each real file once."""
    seen: set[Path] = set()
    for path in sorted(root.rglob("compare/compare.json"))[:MAX_COMPARES]:
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        try:
            data = read_json_bounded(path, root)
        except ConfigError as exc:
            yield path, None, str(exc).removeprefix(f"{path}: ")
            continue
        problem = _problem(data)
        if problem:
            yield path, None, problem
            continue
        data.setdefault("deltas", [])
        data.setdefault("pairs", [])
        yield path, data, ""
