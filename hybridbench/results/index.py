"""index.jsonl beside the run directories: one line per finished run, what a dashboard lists and a comparison
picks its baseline from (DESIGN.md §1: "an index over all runs feeds compare and the dashboard")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["INDEX_NAME", "append_to_index"]

INDEX_NAME = "index.jsonl"


def append_to_index(run_dir: Path, bundle: dict[str, Any]) -> Path:
    """Append the run's summary line to ``run_dir.parent / index.jsonl`` and return that path.

    One ``write`` of one short line to a file opened for appending: concurrent runs (a sweep on a cluster)
    interleave whole lines, never parts of them.
    """
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
    path = run_dir.parent / INDEX_NAME
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
    return path
