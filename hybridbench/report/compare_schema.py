"""compare.json's schema version, in a module of its own: the PR summary reads compare.json on a runner with
nothing installed (ci/pr.yml's publish job runs ``python3 -m hybridbench.dashboard.pr_summary`` from the
checkout), so it must not import compare itself (numpy, through its statistics)."""

from __future__ import annotations

__all__ = ["COMPARE_SCHEMA_VERSION"]

COMPARE_SCHEMA_VERSION = 1
