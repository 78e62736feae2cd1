"""index.jsonl beside the run directories: one line per finished run, what a dashboard lists and a comparison
picks its baseline from (docs/architecture.md: "an index over all runs feeds compare and the dashboard")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["INDEX_NAME", "append_to_index", "index_entry"]

INDEX_NAME = "index.jsonl"


def index_entry(run_dir: Path, bundle: Mapping[str, Any]) -> dict[str, Any]:
    """The run's line in index.jsonl (``python -m hybridbench.results index`` rebuilds the file from these)."""
    prov = bundle.get("provenance", {})
    engine = prov.get("engine", {})
    entry = {
        "run_dir": str(run_dir),
        "name": bundle.get("name"),
        "created": bundle.get("created"),
        "verdict": bundle.get("verdict"),
        "modelled": bundle.get("modelled"),
        "arms": bundle.get("arms"),
        "engine": engine.get("name"),
        "engine_version": engine.get("version"),
        "git_sha": prov.get("git_sha"),
        "pr_number": prov.get("pr_number"),
        "plan_fingerprint": prov.get("plan_fingerprint"),
        "rescored": (bundle.get("rescored") or {}).get("created"),  # None: the run's own verdict
        "failed_checks": sorted({f"{c['check']}:{c['workload']}:{c['arm']}"
                                 for c in bundle.get("checks", []) if c.get("status") == "fail"}),
    }
    return entry


def append_to_index(run_dir: Path, bundle: Mapping[str, Any]) -> Path:
    """Append the run's summary line to ``run_dir.parent / index.jsonl`` and return that path.

    One ``write`` of one short line to a file opened for appending: concurrent runs (a sweep on a cluster)
    interleave whole lines, never parts of them.
    """
    path = run_dir.parent / INDEX_NAME
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(index_entry(run_dir, bundle), sort_keys=True, default=str) + "\n")
    return path
